"""Dispatch a composed configuration to its task. Knows nothing of Hydra's globals: __main__ passes
everything in as plain values."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.config import DlbenchConfig


class TaskFailed(RuntimeError):
    """A task finished but something in it failed; results that were measured are already logged."""


@dataclass(frozen=True)
class AppContext:
    """What a task needs from its surroundings.

    ``config_dirs``: the config search path (registry and training entries are found there);
    ``start_dir``: where the user started dlbench (the default MLflow store lives there);
    ``output_dir``: this job's scratch folder (protocol CSVs); ``sweep_id``/``job``: set in a multirun;
    ``config_yaml``: the resolved configuration, logged with each run.
    """

    config_dirs: tuple[Path, ...]
    start_dir: Path
    output_dir: Path
    sweep_id: str = ""
    job: str = ""
    overrides: tuple[str, ...] = ()
    config_yaml: str = ""
    extra_tags: dict[str, str] = field(default_factory=dict)


TASK_MODULES = {
    "run": "dlbench.tasks.run",
    "list": "dlbench.tasks.list",
    "extract": "dlbench.tasks.extract",
    "benchmark_model": "dlbench.tasks.benchmark_model",
    "evaluate": "dlbench.tasks.evaluate",
    "compare": "dlbench.tasks.compare",
}


def run_task(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """Run ``cfg.task``; returns the process exit status (0 when everything succeeded)."""
    module_name = TASK_MODULES[cfg.task]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            raise TaskFailed(f"task={cfg.task} is not implemented in this version of dlbench") from err
        raise
    return int(module.run(cfg, ctx))
