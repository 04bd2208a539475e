"""The command line, a Hydra app: ``python -m dlbench [task=...] [+benchmark=NAME] [key=value ...]``. The only
package that reads Hydra's globals; it hands the task plain values (:class:`AppContext`).

The entry answers ``--help`` without Hydra, refuses keys outside the schema before composing, and turns
every failure into a short message with a meaningful exit status (see :mod:`dlbench.cli.errors`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dlbench import CONF_DIR

INTERRUPT_STATUS = {"KeyboardInterrupt": 130, "RunInterrupted": 143}


def _entry(cfg: object) -> None:
    from dlbench.cli.job import run_job
    from dlbench.core import interrupts

    interrupts.check()  # a Ctrl-C that Hydra's composition lost on the way
    run_job(cfg)


def main() -> None:
    import hydra

    import dlbench.cli.callbacks  # noqa: F401 - quiets Hydra's schema-matching warning for our launcher files
    from dlbench.config import register_configs

    register_configs()
    app = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_entry)
    app()


def _check_overrides(argv: list[str]) -> None:
    """Refuse keys the schema does not have, with or without ``+``, before anything is composed."""
    from dlbench.cli.errors import UnknownKeys
    from dlbench.cli.keys import command_line_overrides, config_dirs_from_argv, config_groups, schema_keys, unknown_keys
    from dlbench.config import DlbenchConfig

    overrides = command_line_overrides(argv)
    if not overrides:
        return
    groups = config_groups(config_dirs_from_argv(argv, CONF_DIR))
    unknown = unknown_keys(overrides, schema_keys(DlbenchConfig), groups)
    if unknown:
        raise UnknownKeys([problem.message() for problem in unknown])


def _final_line() -> str:
    """The runs this command made (in this process, or by the jobs of its multirun), for the last line."""
    summary = sys.modules.get("dlbench.cli.summary")
    sweep_dir = summary.RememberSweep.sweep_dir if summary is not None else None
    if sweep_dir is None and "dlbench.tracking.runs" not in sys.modules:
        return ""  # nothing here opened a run (and importing tracking to say so would cost a second)
    from dlbench.cli.summary import final_line, read_records, records_of_this_process

    records, failed_jobs = read_records(sweep_dir) if sweep_dir is not None else (records_of_this_process(), [])
    new_stores = []
    if "dlbench.tracking.store" in sys.modules:
        from dlbench.tracking.store import TrackingTarget, created_by_this_process

        new_stores = [r.uri for r in records if created_by_this_process(TrackingTarget(r.uri, r.experiment))]
    return final_line(records, Path.cwd(), new_stores, failed_jobs)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message"): what Python itself would print
    return 1


def cli() -> None:
    """Console entry: the command runs in this process and ends with it (nothing is left running)."""
    try:
        run_here()
    except KeyboardInterrupt as err:  # Ctrl-C while still importing, before the command handles it (run_here does)
        sys.exit(_interrupted(err))


def run_here() -> None:
    """Run the command. Errors become messages (the stack with ``verbose=true`` or ``HYDRA_FULL_ERROR=1``);
    Ctrl-C and SIGTERM end with 130 and 143 after the runs were ended KILLED; the last line names the runs."""
    from dlbench.cli.help import is_plain_help
    from dlbench.cli.keys import split_argv
    from dlbench.core import interrupts

    interrupts.install()
    # Hydra's parser takes overrides only before its flags; people write `--config-dir DIR` anywhere
    flags, overrides = split_argv(sys.argv[1:])
    argv = sys.argv[1:] = flags + overrides
    if is_plain_help(argv):
        from dlbench.cli.help import render_help
        from dlbench.cli.keys import config_dirs_from_argv

        print(render_help(config_dirs_from_argv(argv, CONF_DIR)))
        return
    from dlbench.cli.job import FULL_ERROR_ENV, user_wants_stack

    verbose = user_wants_stack(any(w.lstrip("+") in ("verbose=true", "verbose=True", "verbose=1") for w in argv))
    os.environ.setdefault(FULL_ERROR_ENV, "1" if verbose else "0")
    # Hydra prints its own report (a traceback) for errors unless this is set; with it they come back here.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    status = 0
    try:
        _check_overrides(argv)
        main()
    except SystemExit as done:
        status = _exit_status(done.code)
    except KeyboardInterrupt as err:
        status = _interrupted(err)
    except Exception as err:
        from dlbench.cli.errors import JobFailed, report
        from dlbench.core.errors import interrupt_behind

        interrupt = interrupt_behind(err)
        if interrupt is not None:  # what failed while Ctrl-C was being handled failed because of it
            status = _interrupted(interrupt)
        else:  # a failed multirun job has said what went wrong already
            status = err.status if isinstance(err, JobFailed) else report(err, verbose)
    lost = interrupts.noted()
    if status == 0 and lost is not None:  # a library swallowed the interrupt after the last checkpoint
        status = _interrupted(lost())
    line = _final_line()
    if line:
        print(line, file=sys.stderr if status else sys.stdout, flush=True)
    _exit_now(status)


def _interrupted(err: KeyboardInterrupt) -> int:
    print(f"dlbench: interrupted ({err})" if str(err) else "dlbench: interrupted", file=sys.stderr)
    return INTERRUPT_STATUS.get(type(err).__name__, 130)


def _exit_now(status: int) -> None:
    """Exit without tearing the interpreter down: with MLflow, pandas and SQLAlchemy loaded that takes a second
    or two, after everything was written. The exit handlers still run (logs, temporary folders, workers)."""
    import atexit

    if "dlbench.tracking.store" not in sys.modules:
        sys.exit(status)  # nothing heavy was loaded: the ordinary exit is as fast
    import threading

    # what normal interpreter exit does first: join the threads and run threading's exit hooks (a multirun's
    # own run is summed up there when the sweep failed or was interrupted, see cli.callbacks.at_exit)
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
