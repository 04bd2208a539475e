"""MLflow Projects entry: turn typed MLproject parameters into ``python -m dlbench`` Hydra overrides.

``mlflow run . -e sweep -P benchmark=conv -P batch_size=1,8,32`` runs this module; it replaces itself with
``python -m dlbench`` (an argument list, no shell). The dlbench runs become children of the run that
``mlflow run`` opened (``MLFLOW_RUN_ID``), in that run's experiment.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Sequence

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")
_BATCH_SIZES = re.compile(r"[1-9][0-9]*(,[1-9][0-9]*)*")


class ParameterError(ValueError):
    """An MLproject parameter that cannot become a Hydra override."""


def _word(name: str, value: str) -> str:
    if not _WORD.fullmatch(value):
        raise ParameterError(f"parameter {name}={value!r}: use a name of letters, digits, '_', '-', '.' or '/'")
    return value


def _batch_sizes(value: str) -> str:
    text = value.replace(" ", "")
    if not _BATCH_SIZES.fullmatch(text):
        raise ParameterError(f"parameter batch_size={value!r}: use a positive integer or a list like 1,8,32")
    return text


def split_overrides(text: str) -> list[str]:
    """The free-form ``overrides`` parameter, split like a shell would (quotes group, nothing is run)."""
    try:
        return shlex.split(text)
    except ValueError as err:
        raise ParameterError(f"parameter overrides={text!r}: {err}") from err


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dlbench.tracking.project", description=__doc__)
    sub = parser.add_subparsers(dest="entry_point", required=True)
    for name in ("sweep", "train", "evaluate"):
        entry = sub.add_parser(name)
        entry.add_argument("--benchmark", required=True)
        entry.add_argument("--batch-size", default="")
        entry.add_argument("--backend", default="")
        entry.add_argument("--device", default="")
        entry.add_argument("--steps", default="")
        entry.add_argument("--overrides", default="")
    return parser


def hydra_arguments(argv: Sequence[str]) -> tuple[str, list[str]]:
    """The entry point and the ``python -m dlbench`` arguments for MLproject-style ``argv``."""
    args = _parser().parse_args(list(argv))
    arguments: list[str] = []
    if args.entry_point == "evaluate":
        arguments.append("task=evaluate")
    arguments.append(f"+benchmark={_word('benchmark', args.benchmark)}")
    batch_sizes = _batch_sizes(args.batch_size) if args.batch_size else ""
    if batch_sizes:
        arguments.append(f"batch_size={batch_sizes}")
    if args.backend:
        arguments.append(f"backend={_word('backend', args.backend)}")
    if args.device:
        arguments.append(f"device={_word('device', args.device)}")
    if args.steps:
        if not args.steps.isdigit():
            raise ParameterError(f"parameter steps={args.steps!r}: use a positive integer")
        arguments.append(f"steps={args.steps}")
    arguments += split_overrides(args.overrides)
    # A sweep is always a Hydra multirun (one job per batch size); the other entry points only when asked.
    if args.entry_point == "sweep" or "," in batch_sizes:
        arguments.insert(0, "--multirun")
    return args.entry_point, arguments


def main(argv: Sequence[str] | None = None) -> None:
    try:
        entry_point, arguments = hydra_arguments(sys.argv[1:] if argv is None else argv)
    except ParameterError as err:
        raise SystemExit(f"dlbench.tracking.project: {err}") from None
    parent = os.environ.pop("MLFLOW_RUN_ID", "")
    if parent:
        from dlbench.tracking.run import TrackedRun
        from dlbench.tracking.store import TrackingError, resolve_tracking, run_experiment_name

        target = resolve_tracking()
        try:
            os.environ["MLFLOW_EXPERIMENT_NAME"] = run_experiment_name(target, parent)
        except TrackingError as err:
            raise SystemExit(f"dlbench.tracking.project: {err}") from None
        os.environ["DLBENCH_PARENT_RUN_ID"] = parent
        TrackedRun.attach(target, parent).set_tags(
            {"dlbench.entry_point": entry_point, "dlbench.command": shlex.join(["python", "-m", "dlbench", *arguments])}
        )
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "dlbench", *arguments])  # noqa: S606 - argument list, no shell


if __name__ == "__main__":
    main()
