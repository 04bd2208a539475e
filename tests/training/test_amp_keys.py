"""The ``amp`` and ``channels_last`` keys reach the project's training scripts as their arguments; a bad value
names the key and its choices; a script that does not take them is refused, not run in its own precision."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from dlbench import CONF_DIR
from dlbench.config import DlbenchConfig, register_configs
from dlbench.core.errors import ConfigurationError
from dlbench.operators.registry import load_registry
from dlbench.training.scripts import check_training_dtype, resolve_parameters


def config(*overrides: str) -> DlbenchConfig:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="config", overrides=list(overrides)))  # type: ignore[return-value]


@pytest.mark.parametrize("training", ["resnet_cifar", "transformer_lm", "mlp", "mlp_ddp"])
def test_the_training_scripts_get_amp_and_channels_last(training: str) -> None:
    cfg = config(f"+benchmark={training}", "amp=bf16", "channels_last=true")
    arguments = resolve_parameters(load_registry().training(training), cfg)
    assert arguments[arguments.index("--amp") + 1] == "bf16"
    assert arguments[arguments.index("--channels-last") + 1].lower() == "true"


def test_an_unknown_amp_names_the_key_and_its_values() -> None:
    with pytest.raises(ValueError, match="amp='fp8': use one of none, bf16, fp16"):
        config("+benchmark=mlp", "amp=fp8")


def test_a_script_that_does_not_take_amp_is_refused_naming_the_entry() -> None:
    cfg = config("+benchmark=mlp", "amp=fp16")
    entry = load_registry().training("mlp")
    entry = type(entry)(**{**vars(entry), "parameters": "--batch-size ${batch_size}"})
    with pytest.raises(ConfigurationError, match=r"amp=fp16: training entry mlp .*\(no \$\{amp\}"):
        check_training_dtype(cfg, entry)
