"""``python -m dlbench --help`` without composing the configuration: Hydra's help would compose it and list
every config group first (over a second on a small machine), for a page that only needs the defaults. The
page is the template of ``conf/hydra/help/dlbench.yaml``, which Hydra renders too when ``--help`` comes with
overrides."""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

from dlbench.cli.keys import config_groups

HELP_FILE = Path("hydra") / "help" / "dlbench.yaml"
HELP_FLAGS = ("--help", "-h")


def is_plain_help(argv: Sequence[str]) -> bool:
    """``--help`` with nothing that changes the page's values (``--config-dir`` only adds groups)."""
    words = list(argv)
    if not any(w in HELP_FLAGS for w in words):
        return False
    rest = [w for w in words if w not in HELP_FLAGS]
    while rest[:1] == ["--config-dir"] and len(rest) >= 2 or rest[:1] and rest[0].startswith("--config-dir="):
        rest = rest[2:] if rest[0] == "--config-dir" else rest[1:]
    return not rest


def _first(config_dirs: Sequence[Path], relative: Path) -> Path:
    for directory in config_dirs:
        if (directory / relative).is_file():
            return directory / relative
    raise FileNotFoundError(f"{relative} in none of {', '.join(map(str, config_dirs))}")


def group_lines(config_dirs: Sequence[Path]) -> str:
    """Hydra's ``$APP_CONFIG_GROUPS``: ``group: option, option`` for every group outside ``hydra/``."""
    groups = {name: options for name, options in config_groups(config_dirs).items() if name.split("/")[0] != "hydra"}
    return "".join(f"{name}: {', '.join(options)}\n" for name, options in groups.items())


def render_help(config_dirs: Sequence[Path]) -> str:
    """The help page with the defaults of the schema and ``config.yaml``, as Hydra would render it."""
    from omegaconf import OmegaConf

    from dlbench.config import DlbenchConfig
    from dlbench.core.resolvers import register_resolvers

    register_resolvers()
    app = OmegaConf.load(_first(config_dirs, Path("config.yaml")))
    for hydra_only in ("defaults", "hydra"):
        app.pop(hydra_only, None)
    values = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(DlbenchConfig), app), resolve=False)
    assert isinstance(values, dict)
    values["hydra"] = {"help": OmegaConf.load(_first(config_dirs, HELP_FILE))}
    root = OmegaConf.create(values)
    template = string.Template(str(root.hydra.help.template))
    return template.safe_substitute(
        APP_CONFIG_GROUPS=group_lines(config_dirs), HYDRA_CONFIG_GROUPS="", FLAGS_HELP="", CONFIG=""
    )
