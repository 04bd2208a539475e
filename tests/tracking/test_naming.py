"""What MLflow's UI shows as text: rounded metric values, run names that fit the run list, metric keys MLflow
accepts, the command as a run's source, and links that open the "Model training" view with dlbench's columns."""

from __future__ import annotations

import json
import math
import posixpath
import shlex
import urllib.parse

import pytest

from dlbench.tracking.naming import dlbench_command, metric_key, round_significant, run_name, short_host
from dlbench.tracking.store import TrackingTarget
from dlbench.tracking.ui import (
    VIEW_KEY,
    artifact_link,
    compare_link,
    experiment_link,
    run_link,
    ui_command,
    view_state,
)


@pytest.mark.parametrize(
    ("value", "rounded"),
    [(47.4965765, 47.5), (0.000123456, 0.0001235), (123456.7, 123500.0), (6.0, 6.0), (0.0, 0.0), (-2.71828, -2.718)],
)
def test_metric_values_keep_four_significant_digits(value: float, rounded: float) -> None:
    assert round_significant(value) == rounded
    assert repr(round_significant(value)) == repr(rounded), "no binary tail such as 47.50000000001"


def test_non_finite_values_pass_through_rounding() -> None:
    assert math.isnan(round_significant(float("nan")))
    assert round_significant(float("inf")) == float("inf")


def test_run_name_says_benchmark_implementation_batch_dtype_and_host_and_fits_the_list_column() -> None:
    name = run_name("conv", ["torch_conv"], 32, "float32")
    assert name == f"conv-torch_conv-bs32-fp32fw-{short_host()}"
    assert len(name) <= 40
    assert run_name("conv", ["torch_conv"], 8, "bfloat16", "cuda").endswith(f"-bs8-bf16-cuda-{short_host()}")
    assert run_name("mlp", ["mlp", "train"], 8, "float32").startswith("mlp-train-bs8"), "no repeated benchmark"


def test_a_float32_run_name_says_its_math_and_other_dtypes_do_not() -> None:
    host = short_host()
    names = {m: run_name("conv", ["cuda_conv"], 32, "float32", "cuda", m) for m in ("ieee", "tf32", "framework")}
    assert names == {
        "ieee": f"conv-cuda_conv-bs32-fp32ieee-cuda-{host}",
        "tf32": f"conv-cuda_conv-bs32-fp32tf32-cuda-{host}",
        "framework": f"conv-cuda_conv-bs32-fp32fw-cuda-{host}",
    }
    assert run_name("conv", ["cuda_conv"], 32, "float16", "cuda", "tf32") == f"conv-cuda_conv-bs32-fp16-cuda-{host}"


def test_short_host_drops_the_domain_and_caps_the_length() -> None:
    assert short_host("node017.cluster.example.org") == "node017"
    assert short_host("a-very-long-hostname-indeed") == "a-very-long-"


def test_metric_keys_keep_slashes_and_replace_what_mlflow_refuses() -> None:
    assert metric_key("op", "layer1.0/conv1:Conv", "median_ms") == "op/layer1.0/conv1:Conv/median_ms"
    assert metric_key("op", "conv.operations[3]", "median_ms") == "op/conv.operations_3_/median_ms"
    assert len(metric_key("op", "x" * 400, "median_ms")) == 250


def test_metric_keys_of_onnx_node_names_are_paths_mlflow_accepts() -> None:
    for name in ("/layers/layers.0/Gemm", "a//b/", "./x/../y", "/"):
        key = metric_key("op", name, "median_ms")
        assert posixpath.normpath(key) == key and not key.startswith(("/", "..")), key
    assert metric_key("op", "/layers/layers.0/Gemm", "median_ms") == "op/layers/layers.0/Gemm/median_ms"


def test_source_is_the_command_that_reproduces_the_run() -> None:
    command = dlbench_command(["+benchmark=conv", "batch_size=1,8", "compare.filter=params.a = '1'"], multirun=True)
    assert shlex.split(command) == [
        "python", "-m", "dlbench", "-m", "+benchmark=conv", "batch_size=1,8", "compare.filter=params.a = '1'"
    ]  # fmt: skip


def test_links_open_the_model_training_view_with_dlbench_columns() -> None:
    local = TrackingTarget("sqlite:////tmp/x/mlflow.db", "dlbench")
    link = experiment_link(local, "7")
    assert link.startswith("http://127.0.0.1:5000/#/experiments/7/runs?")
    query = urllib.parse.parse_qs(link.split("?", 1)[1])
    assert query == {"workflowType": ["machine_learning"], "viewStateShareKey": [VIEW_KEY]}
    server = TrackingTarget("https://mlflow.example.org/", "team")
    assert (
        run_link(server, "3", "abc")
        == "https://mlflow.example.org/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    compare = urllib.parse.parse_qs(compare_link(server, "3", ["a", "b"]).split("?", 1)[1])
    assert json.loads(compare["runs"][0]) == ["a", "b"] and json.loads(compare["experiments"][0]) == ["3"]
    assert compare["workflowType"] == ["machine_learning"]
    assert (
        artifact_link(server, "3", "abc", "sweep/conv-torch conv_vs_batch_size.png")
        == "https://mlflow.example.org/#/experiments/3/runs/abc/artifacts/sweep/conv-torch%20conv_vs_batch_size.png"
        "?workflowType=machine_learning"
    ), "the run page's artifact tab, opened on the plot"
    assert ui_command(local) == "mlflow ui --backend-store-uri sqlite:////tmp/x/mlflow.db"


def test_view_lists_params_and_run_level_metrics_in_order_with_widths() -> None:
    state = json.loads(view_state())
    assert state["selectedColumns"][:2] == ["params.`batch_size`", "params.`dtype`"]
    assert "metrics.`total_time_ms`" in state["selectedColumns"]
    assert "tags.`dlbench.noisy`" in state["selectedColumns"], "whether the machine was busy, per run"
    assert state["columnOrder"][:2] == ["1", "attributes.`Run Name`"]
    assert state["columnWidths"]["attributes.`Run Name`"] >= 200
    assert set(state["selectedColumns"]) <= set(state["columnOrder"])
