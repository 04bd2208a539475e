"""Strategy tables kept as data: read from a YAML file, or taken from an already-composed config node."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def load_mapping(
    source: str | Path | Mapping[str, Any] | None, default: Path, error: type[ValueError], what: str
) -> tuple[Any, str]:
    """The table's data and where it came from: ``source`` as a YAML path, a mapping (e.g. a Hydra node), or
    ``default`` when None. A missing or malformed file raises ``error`` naming the file."""
    if source is None or isinstance(source, str | Path):
        import yaml

        path = Path(source) if source is not None else default
        if not path.is_file():
            raise error(f"{path}: no such {what}")
        try:
            return yaml.safe_load(path.read_text(encoding="utf-8")), str(path)
        except yaml.YAMLError as err:
            raise error(f"{path}: not valid YAML: {err}") from err
    from omegaconf import DictConfig, OmegaConf

    if isinstance(source, DictConfig):
        source = OmegaConf.to_container(source, resolve=True)  # type: ignore[assignment]
    return source, f"{what.split()[0]} config"
