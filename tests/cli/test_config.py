"""Configuration composes from the real conf/, and mistakes fail at compose time with Hydra's message."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_dlbench
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from dlbench import CONF_DIR
from dlbench.config import DlbenchConfig, register_configs
from dlbench.operators.workload import operations_from_benchmark

BENCHMARKS = sorted(p.stem for p in (CONF_DIR / "benchmark").glob("*.yaml"))


def compose_config(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_shipped_benchmark_composes_and_validates(name: str) -> None:
    cfg = compose_config(f"+benchmark={name}", "batch_size=4")
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, DlbenchConfig)
    assert config.benchmark is not None and config.benchmark.name == name
    if config.benchmark.kind == "operator":
        operations = operations_from_benchmark(config.benchmark)
        assert operations and all(op.params for op in operations)


def test_batch_size_flows_into_operation_parameters() -> None:
    config = OmegaConf.to_object(compose_config("+benchmark=gemm", "batch_size=3"))
    ops = {op.name: op.param_dict for op in operations_from_benchmark(config.benchmark)}
    assert ops["ffn_up"]["M"] == 3 * 128 and ops["attn_scores"]["batch"] == 3 * 12
    assert ops["resnet50_fc"] == {"M": 3, "K": 2048, "N": 1000, "transA": 0, "transB": 1, "batch": 1}


def test_resnet50_convolutions_cover_all_53_layers() -> None:
    config = OmegaConf.to_object(compose_config("+benchmark=conv", "batch_size=2"))
    ops = operations_from_benchmark(config.benchmark)
    assert len(ops) == 23 and sum(op.count for op in ops) == 53
    first = ops[0]
    assert first.param_dict["N"] == 2 and first.flops == pytest.approx(2 * 2 * 64 * 112 * 112 * 3 * 7 * 7)


def test_misspelt_top_level_key_fails_at_compose_time() -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_config("batchsize=8")
    assert isinstance(info.value.__cause__, ConfigKeyError | ValidationError) or "batchsize" in str(info.value)


def test_unknown_benchmark_lists_the_available_ones() -> None:
    with pytest.raises(ConfigCompositionException, match="Could not find 'benchmark/cnov'") as info:
        compose_config("+benchmark=cnov")
    assert "conv" in str(info.value) and "gemm" in str(info.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("device=tpu", "device='tpu': use one of cpu, cuda, auto"),
        ("dtype=int3", "dtype='int3'"),
        ("task=dance", "task='dance'"),
        ("batch_size=0", "batch_size must be >= 1"),
        ("evaluate.caches=warm", "evaluate.caches must be one of hot, cold, step, got 'warm'"),
    ],
)
def test_invalid_values_name_the_key_and_allowed_values(override: str, message: str) -> None:
    cfg = compose_config("+benchmark=relu", override)
    with pytest.raises(ValueError, match=message):
        OmegaConf.to_object(cfg)


def test_the_evaluations_cache_state_defaults_to_the_steps_own() -> None:
    config = OmegaConf.to_object(compose_config("+benchmark=resnet_cifar"))
    assert config.evaluate.caches == "step" and config.measure.caches == "hot"  # a sweep has no step: hot


@pytest.mark.parametrize("typo", ["batchsize=8", "+batchsize=8", "++batchsize=8"])
def test_cli_typo_exits_non_zero_before_running_anything(tmp_path: Path, typo: str) -> None:
    result = run_dlbench("+benchmark=conv", typo, cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown key 'batchsize'" in result.stderr and "did you mean batch_size?" in result.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_cli_without_benchmark_says_how_to_choose_one(tmp_path: Path) -> None:
    result = run_dlbench(cwd=tmp_path)
    assert result.returncode != 0
    assert "python -m dlbench +benchmark=conv" in result.stderr


def test_overrides_may_come_after_hydra_s_flags(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    result = run_dlbench(
        "batch_size=3", "--config-dir", str(conf), "threads=2", "--cfg", "job", "dtype=bfloat16", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "batch_size: 3" in result.stdout and "threads: 2" in result.stdout and "dtype: bfloat16" in result.stdout


def test_evaluate_rounds_default_to_three_and_the_old_bracket_key_still_means_what_it_did() -> None:
    assert OmegaConf.to_object(compose_config("+benchmark=resnet_cifar")).evaluate.rounds == 3
    once = OmegaConf.to_object(compose_config("+benchmark=resnet_cifar", "evaluate.bracket=false"))
    assert once.evaluate.rounds == 1, "bracket=false trained once: one round"
    again = OmegaConf.to_object(compose_config("+benchmark=resnet_cifar", "evaluate.bracket=true"))
    assert again.evaluate.rounds == 3, "bracket=true trained again after the benchmarks: the rounds do"


def test_bracket_asking_for_a_second_training_that_one_round_lacks_is_refused_with_the_key_to_use(
    tmp_path: Path,
) -> None:
    result = run_dlbench("+benchmark=resnet_cifar", "task=evaluate", "evaluate.bracket=true", "evaluate.rounds=1",
                         cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "evaluate.rounds" in result.stderr and "drop evaluate.bracket" in result.stderr
    assert "Traceback" not in result.stderr
