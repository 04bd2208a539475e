"""Command line: ``python -m dlbench [task=...] [+benchmark=NAME] [key=value ...]`` (a Hydra app)."""

from __future__ import annotations

import sys
from pathlib import Path

from dlbench import CONF_DIR


def _context_from_hydra(cfg: object) -> object:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from dlbench.app import AppContext

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
    )


def _entry(cfg: object) -> None:
    from omegaconf import OmegaConf

    from dlbench.app import TaskFailed, run_task
    from dlbench.config import DlbenchConfig
    from dlbench.tracking import install_sigterm_handler

    install_sigterm_handler()
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, DlbenchConfig)
    status = run_task(config, _context_from_hydra(cfg))
    if status:
        raise TaskFailed(f"task={config.task} finished with failures (exit status {status}); see the log above")


def main() -> None:
    import hydra

    from dlbench.config import register_configs

    register_configs()
    app = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_entry)
    app()


if __name__ == "__main__":
    sys.exit(main())
