"""One Hydra job: the composed configuration checked and handed to its task as plain values. A failure is
reported for people here, inside the task function, because Hydra prints a traceback for anything that
escapes it; a multirun job then raises :class:`JobFailed`, so Hydra records it FAILED and runs the others."""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlbench.cli.errors import ConfigError, JobFailed, report
from dlbench.core import interrupts
from dlbench.core.errors import TaskFailed, interrupt_behind

#: Set by the entry: whether the user asked for stack traces (HYDRA_FULL_ERROR=1 is set for Hydra's sake).
FULL_ERROR_ENV = "DLBENCH_FULL_ERROR"


def user_wants_stack(verbose_key: bool = False) -> bool:
    requested = os.environ.get(FULL_ERROR_ENV, os.environ.get("HYDRA_FULL_ERROR", ""))
    return verbose_key or requested == "1"


def _parent_run_tags() -> dict[str, str]:
    """Runs become children of the run named by DLBENCH_PARENT_RUN_ID (set by ``dlbench.tracking.project``)."""
    parent = os.environ.get("DLBENCH_PARENT_RUN_ID", "")
    return {"mlflow.parentRunId": parent} if parent else {}


def _context(cfg: Any, hydra_cfg: Any, multirun: bool) -> Any:
    from omegaconf import OmegaConf

    from dlbench.core.context import AppContext

    dirs = [Path(source.path) for source in hydra_cfg.runtime.config_sources if source.schema == "file"]
    return AppContext(
        config_dirs=tuple(dict.fromkeys(dirs)),
        start_dir=Path.cwd(),
        output_dir=Path(hydra_cfg.runtime.output_dir),
        sweep_id=Path(hydra_cfg.sweep.dir).name if multirun else "",
        job=str(hydra_cfg.job.num) if multirun else "",
        overrides=tuple(hydra_cfg.overrides.task),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        extra_tags=_parent_run_tags(),
    )


def _job_cores(config: Any, hydra_cfg: Any, multirun: bool) -> Any:
    """``exclusive_cores=true`` in a multirun: pin this job to its own block of cores (a context manager)."""
    from dlbench.cli.callbacks import launcher_parallelism
    from dlbench.core.affinity import exclusive_cores

    if not getattr(config, "exclusive_cores", False) or not multirun:
        return nullcontext(None)
    lock_dir = Path(hydra_cfg.sweep.dir) / ".cores"
    return exclusive_cores(int(hydra_cfg.job.num), config.threads, launcher_parallelism(hydra_cfg.launcher), lock_dir)


def to_config(cfg: Any) -> Any:
    """The typed configuration; a failed check becomes :class:`ConfigError` with the check's message."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from dlbench.config import DlbenchConfig

    try:
        config = OmegaConf.to_object(cfg)
    except (ValueError, OmegaConfBaseException) as err:
        lines = [line for line in str(err).splitlines() if line.strip() and "full_key:" not in line]
        raise ConfigError("\n".join(line for line in lines if "object_type=" not in line)) from err
    assert isinstance(config, DlbenchConfig)
    return config


def _measures_embedded_kernels(config: Any) -> bool:
    """Whether the task will (most likely) measure the embedded torch kernels straight away."""
    operator_sweep = config.task == "run" and config.benchmark is not None and config.benchmark.kind == "operator"
    return config.backend == "torch" and (operator_sweep or config.task == "benchmark_model")


def _run(cfg: Any, hydra_cfg: Any, multirun: bool) -> None:
    from dlbench.core.slurm import job_threads
    from dlbench.tasks import run_task

    config = to_config(cfg)
    config = replace(config, threads=job_threads(config.threads))  # threads=0 in a Slurm job: the job's CPUs
    context = _context(cfg, hydra_cfg, multirun)
    with _job_cores(config, hydra_cfg, multirun) as block:
        if block is not None:
            config = replace(config, threads=block.threads)
            context = replace(context, extra_tags={**context.extra_tags, "dlbench.cores": block.label})
        if _measures_embedded_kernels(config):
            from dlbench.operators.embedded import prestart_embedded
            from dlbench.operators.runner import run_settings

            # the worker imports torch on another core while the task imports MLflow and opens the store
            prestart_embedded(run_settings(config, config.device).environment())
        status = run_task(config, context)
    if status:
        raise TaskFailed(f"task={config.task} finished with failures (exit status {status}); see the log above")


def _record_runs(output_dir: Path, before: int, failed: bool) -> None:
    """A multirun job leaves its runs beside its output; the launching process names them at the end."""
    import sys

    from dlbench.cli.summary import RUNS_FILE, records_of_this_process, write_records

    # a job that opened no run need not import tracking just to say so (that costs a second)
    records = records_of_this_process()[before:] if "dlbench.tracking.runs" in sys.modules else []
    write_records(output_dir / RUNS_FILE, records, failed)


def run_job(cfg: Any) -> None:
    """Hydra's task function. Errors end as a message: ``SystemExit`` in a single run, ``JobFailed`` in a
    multirun (after the message), interrupts propagate (runs already ended KILLED)."""
    import sys

    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    multirun = str(hydra_cfg.mode) == "RunMode.MULTIRUN"
    interrupts.install()  # again: a Slurm or joblib job starts here, not in the command line's entry
    before = 0
    if multirun and "dlbench.tracking.runs" in sys.modules:
        from dlbench.cli.summary import records_of_this_process

        before = len(records_of_this_process())
    failure: BaseException | None = None
    try:
        _run(cfg, hydra_cfg, multirun)
        return
    except Exception as err:  # KeyboardInterrupt (and SIGTERM's RunInterrupted) go on to the entry
        failure = err
    except BaseException as err:
        failure = err
        raise
    finally:
        if multirun:
            _record_runs(Path(hydra_cfg.runtime.output_dir), before, failure is not None)
    assert failure is not None
    interrupt = interrupt_behind(failure)
    if interrupt is not None:  # failed while an interrupt was handled: the interrupt goes on to the entry
        raise interrupt from None
    label = f"job {hydra_cfg.job.num} ({' '.join(hydra_cfg.overrides.task)})" if multirun else ""
    status = report(failure, user_wants_stack(bool(cfg.get("verbose", False))), label)
    if multirun:
        raise JobFailed(f"{label} failed", status) from None
    raise SystemExit(status)
