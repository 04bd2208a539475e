"""Failures as people read them: what went wrong, where, and what to do, in a few lines without a traceback.
``verbose=true`` or ``HYDRA_FULL_ERROR=1`` adds the stack. Configuration mistakes exit with 2, failed work
with 1, interrupts with 130 (SIGINT) or 143 (SIGTERM)."""

from __future__ import annotations

import difflib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import dlbench
from dlbench.core.errors import ConfigurationError, TaskFailed

PACKAGE_DIR = Path(dlbench.__file__).resolve().parent
CONFIG_STATUS = 2
FAILED_STATUS = 1
HELP_HINT = "`python -m dlbench --help` lists the main keys, `python -m dlbench --cfg job` every key"


class ConfigError(ValueError):
    """The composed configuration fails its schema's checks (a ``__post_init__`` or a type)."""


class UnknownKeys(ValueError):
    """Overrides naming keys the schema does not have."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class JobFailed(Exception):
    """A job of a multirun whose failure was already reported; Hydra records it FAILED and goes on with the
    other jobs, and the command exits with ``status``."""

    def __init__(self, message: str, status: int = FAILED_STATUS) -> None:
        super().__init__(message)
        self.status = status


def _raised_in_dlbench(err: BaseException) -> bool:
    """Whether dlbench's own code raised ``err`` (a deliberate message), not a library below it."""
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    return Path(last.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE_DIR)


def _where(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(PACKAGE_DIR)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return ""
    path = Path(frame.filename)
    shown = path.resolve().relative_to(PACKAGE_DIR.parent) if path.resolve().is_relative_to(PACKAGE_DIR) else path
    return f"{shown}:{frame.lineno} in {frame.name}"


def _clean_lines(text: str) -> list[str]:
    """OmegaConf's and Hydra's messages without their bookkeeping lines and misleading hints."""
    skip = ("full_key:", "object_type=", "reference_type=", "To append to your config use")
    return [line.rstrip() for line in text.splitlines() if line.strip() and not line.strip().startswith(skip)]


def _missing_option(err: BaseException) -> str:
    missing = str(getattr(err, "missing_cfg_file", "") or "")
    options = list(getattr(err, "options", None) or [])
    group, _, option = missing.rpartition("/")
    if not group:
        return ""
    close = difflib.get_close_matches(option, options, n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]}?" if close else ""
    offered = ", ".join(options) or "none"
    return (
        f"no {group} {option!r}{guess}\n  {group} options: {offered}\n"
        f"  (YAML files in conf/{group}/ and in the {group}/ folder of a --config-dir)"
    )


def describe(err: BaseException) -> tuple[str, int]:
    """The message for ``err`` (without the ``dlbench:`` prefix) and the exit status."""
    from hydra.errors import HydraException, MissingConfigException

    if isinstance(err, UnknownKeys):
        return "\n".join(err.problems) + f"\n  {HELP_HINT}", CONFIG_STATUS
    if isinstance(err, MissingConfigException) and _missing_option(err):
        return _missing_option(err), CONFIG_STATUS
    if isinstance(err, HydraException):
        lines = _clean_lines(str(err))
        cause = err.__cause__
        if cause is not None:
            lines += ["  " + line for line in _clean_lines(str(cause))[:2]]
        return "\n".join(lines) or type(err).__name__, CONFIG_STATUS
    if isinstance(err, ConfigError):
        return f"invalid configuration: {err}\n  {HELP_HINT}", CONFIG_STATUS
    if isinstance(err, ConfigurationError):
        return str(err), CONFIG_STATUS
    if isinstance(err, JobFailed):
        return str(err), err.status
    if isinstance(err, TaskFailed) or type(err).__module__.startswith("dlbench."):
        return str(err), FAILED_STATUS
    if isinstance(err, OSError):
        return f"{err.strerror or err}" + (f": {err.filename}" if err.filename else ""), FAILED_STATUS
    if isinstance(err, ValueError) and _raised_in_dlbench(err):
        return str(err), FAILED_STATUS
    if type(err).__module__.split(".")[0] == "mlflow":
        return f"MLflow: {str(err).splitlines()[0] if str(err) else type(err).__name__}", FAILED_STATUS
    summary = f"{type(err).__name__}: {err}".splitlines()[0]
    return (
        f"unexpected error: {summary}\n  at {_where(err)}\n"
        "  This looks like a bug in dlbench; rerun with verbose=true to see the traceback, and report it.",
        FAILED_STATUS,
    )


def report(err: BaseException, verbose: bool, label: str = "") -> int:
    """Print ``err`` for people (with the stack when ``verbose``) and return the exit status. ``label`` names
    the job of a multirun the error belongs to."""
    message, status = describe(err)
    if verbose:
        traceback.print_exception(err)
    first, *rest = message.splitlines() or [""]
    prefix = f"dlbench: {label}: " if label else "dlbench: "
    lines = [prefix + first] + [line if line.startswith(" ") else f"  {line}" for line in rest]
    print("\n".join(lines), file=sys.stderr, flush=True)
    return status
