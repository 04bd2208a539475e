"""The command line, a Hydra app: ``python -m dlbench [task=...] [+benchmark=NAME] [key=value ...]``. The only
module that reads Hydra's globals; it hands the task plain values (:class:`AppContext`)."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from dlbench import CONF_DIR


def _context_from_hydra(cfg: object) -> object:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from dlbench.core.context import AppContext

    hydra_cfg = HydraConfig.get()
    dirs = [Path(source.path) for source in hydra_cfg.runtime.config_sources if source.schema == "file"]
    multirun = str(hydra_cfg.mode) == "RunMode.MULTIRUN"
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


def _parent_run_tags() -> dict[str, str]:
    """Runs become children of the run named by DLBENCH_PARENT_RUN_ID (set by ``dlbench.tracking.project``)."""
    parent = os.environ.get("DLBENCH_PARENT_RUN_ID", "")
    return {"mlflow.parentRunId": parent} if parent else {}


def _job_cores(config: object) -> object:
    """``exclusive_cores=true`` in a multirun: pin this job to its own block of cores (a context manager)."""
    from hydra.core.hydra_config import HydraConfig

    from dlbench.cli.callbacks import launcher_parallelism
    from dlbench.core.affinity import exclusive_cores

    hydra_cfg = HydraConfig.get()
    if not getattr(config, "exclusive_cores", False) or str(hydra_cfg.mode) != "RunMode.MULTIRUN":
        return nullcontext(None)
    lock_dir = Path(hydra_cfg.sweep.dir) / ".cores"
    return exclusive_cores(int(hydra_cfg.job.num), config.threads, launcher_parallelism(hydra_cfg.launcher), lock_dir)


def install_sigterm_handler() -> None:
    """Turn SIGTERM into :class:`RunInterrupted`, so runs end KILLED and children are stopped."""
    import signal

    from dlbench.core.errors import RunInterrupted

    def handler(signum: int, frame: object) -> None:
        raise RunInterrupted(f"received {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)


def _entry(cfg: object) -> None:
    from omegaconf import OmegaConf

    from dlbench.config import DlbenchConfig
    from dlbench.core.errors import TaskFailed
    from dlbench.core.slurm import job_threads
    from dlbench.tasks import run_task

    install_sigterm_handler()
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, DlbenchConfig)
    config = replace(config, threads=job_threads(config.threads))  # threads=0 in a Slurm job: the job's CPUs
    context = _context_from_hydra(cfg)
    with _job_cores(config) as block:
        if block is not None:
            config = replace(config, threads=block.threads)
            context = replace(context, extra_tags={**context.extra_tags, "dlbench.cores": block.label})
        status = run_task(config, context)
    if status:
        raise TaskFailed(f"task={config.task} finished with failures (exit status {status}); see the log above")


def main() -> None:
    import hydra

    import dlbench.cli.callbacks  # noqa: F401 - quiets Hydra's schema-matching warning for our launcher files
    from dlbench.config import register_configs

    register_configs()
    app = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_entry)
    app()


def cli() -> None:
    """Console entry: a one-line message on Ctrl-C/SIGTERM (runs were already ended KILLED), with the
    conventional exit statuses 130 and 143."""
    try:
        main()
    except KeyboardInterrupt as err:
        print(f"dlbench: interrupted ({err})" if str(err) else "dlbench: interrupted", file=sys.stderr)
        sys.exit(143 if type(err).__name__ == "RunInterrupted" else 130)
