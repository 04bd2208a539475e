"""Command-line overrides checked against the schema's keys: every way of naming a key outside the schema is
caught with the closest key named, and everything the schema or the config groups allow passes."""

from __future__ import annotations

import pytest

from dlbench import CONF_DIR
from dlbench.cli.keys import config_groups, schema_keys, split_argv, unknown_keys
from dlbench.config import DlbenchConfig

KEYS = schema_keys(DlbenchConfig)
GROUPS = config_groups([CONF_DIR])


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("batchsize=8", "batch_size"),
        ("+batchsize=8", "batch_size"),
        ("++batchsize=8", "batch_size"),
        ("~batchsize", "batch_size"),
        ("min_reps=3", "measure.min_reps"),
        ("measure.minreps=3", "measure.min_reps"),
        ("mesure.min_reps=3", "measure.min_reps"),
        ("mlflow.uri=http://h:5000", "mlflow.tracking_uri"),
        ("roofline.gemmsize=512", "roofline.gemm_size"),
        ("experiment=mine", "mlflow.experiment"),
        ("+benchmark.foo=1", ""),
    ],
)
def test_a_key_outside_the_schema_is_named_with_the_closest_key(override: str, suggestion: str) -> None:
    (problem,) = unknown_keys([override], KEYS, GROUPS)
    assert problem.suggestion == suggestion
    assert problem.message().startswith(f"unknown key {problem.key!r} (in `{override}`)")


@pytest.mark.parametrize(
    "override",
    [
        "batch_size=1,8,32",
        "+benchmark=conv",
        "benchmark=conv",
        "benchmark.common.N=4",
        "benchmark.operations=[]",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "match=default",
        "unfold=default",
        "unfold.rules.Conv=[]",
        "~quiet",
        "measure.op_budget_s=5",
        "roofline.dtypes=[float32]",
        "+benchmark@other=conv",
        "not an override",
    ],
)
def test_keys_of_the_schema_groups_and_free_form_maps_pass(override: str) -> None:
    assert unknown_keys([override], KEYS, GROUPS) == []


def test_flags_and_their_values_are_told_apart_from_overrides() -> None:
    argv = ["+benchmark=relu", "--config-dir", "x", "quiet=true", "-m", "--cfg", "job", "--info", "config", "a=1"]
    assert split_argv(argv) == (
        ["--config-dir", "x", "-m", "--cfg", "job", "--info", "config"],
        ["+benchmark=relu", "quiet=true", "a=1"],
    )
