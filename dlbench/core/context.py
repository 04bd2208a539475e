"""What a task needs from its surroundings, as plain values: Hydra's globals never reach below the entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
