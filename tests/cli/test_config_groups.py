"""Every option of every config group composes with the real conf/ and instantiates: benchmarks validate into
typed configs, unfold and match tables load, and each Hydra launcher builds its launcher object."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dlbench import CONF_DIR
from dlbench.analysis import match
from dlbench.config import DlbenchConfig, register_configs
from dlbench.onnx import unfold
from dlbench.operators.registry import load_registry


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose_config(*overrides: str, hydra_node: bool = False):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra_node)


def test_the_config_groups_are_the_ones_this_test_covers() -> None:
    groups = {p.relative_to(CONF_DIR).as_posix() for p in CONF_DIR.rglob("*") if p.is_dir()}
    assert groups == {"benchmark", "match", "unfold", "registry", "training", "hydra", "hydra/launcher", "hydra/help"}


def test_the_help_option_is_dlbench_s_page() -> None:
    cfg = compose_config("task=list", hydra_node=True)
    assert cfg.hydra.help.app_name == "dlbench"
    assert "Tasks (task=..., default list)" in cfg.hydra.help.template


@pytest.mark.parametrize("name", options("benchmark"))
def test_every_benchmark_option_becomes_a_typed_config(name: str) -> None:
    config = OmegaConf.to_object(compose_config(f"+benchmark={name}"))
    assert isinstance(config, DlbenchConfig) and config.benchmark is not None and config.benchmark.name == name


@pytest.mark.parametrize("name", options("unfold"))
def test_every_unfold_option_loads_as_a_strategy_table(name: str) -> None:
    config = OmegaConf.to_object(compose_config("task=list", f"unfold={name}"))
    table = unfold.load_table(config.unfold) if config.unfold else None
    if name == "none":
        assert table is None or not any(table.rules.values())
    else:
        assert table is not None and table.rules.get("Conv")


@pytest.mark.parametrize("name", options("match"))
def test_every_match_option_loads_as_a_matching_table(name: str) -> None:
    config = OmegaConf.to_object(compose_config("task=list", f"match={name}"))
    node = config.match
    table = match.load_table({"operators": node.operators, "framework": node.framework, "training": node.training})
    assert "aten::convolution" in table.rules and table.framework


@pytest.mark.parametrize("name", options("hydra/launcher"))
def test_every_launcher_option_instantiates_its_launcher(name: str) -> None:
    cfg = compose_config("+benchmark=relu", f"hydra/launcher={name}", hydra_node=True)
    launcher = instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__.endswith("Launcher")
    assert cfg.hydra.launcher._target_.rsplit(".", 1)[1] == type(launcher).__name__


def test_every_registry_and_training_entry_loads() -> None:
    registry = load_registry((CONF_DIR,))
    assert {e.name for e in registry.operators} == set(options("registry"))
    assert {e.name for e in registry.trainings} == set(options("training"))
