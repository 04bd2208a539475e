"""The training step as operations and the step-time prediction, on real exported models."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from dlbench.analysis.match import load_table, match_profile
from dlbench.analysis.predict import (
    measured_step_ms,
    op_type_frame,
    prediction_frame,
    prediction_metrics,
    time_breakdown,
)
from dlbench.core.values import Measurement, TimeStats
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.onnx.unfold import load_table as load_unfold_table
from dlbench.onnx.unfold import unfold_operations

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def export(model: nn.Module, example: torch.Tensor, path: Path) -> Path:
    model.eval()
    torch.onnx.export(
        model, (example,), str(path), input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17, dynamo=False,
        training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
    )  # fmt: skip
    return path


def step_of(path: Path, batch: int, options: dict | None = None):
    extraction = extract_operations(path, batch)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, batch).with_inferred_outputs(extraction.nodes)
    training = load_table().training if options is None else options
    return training_step(forward, unfold_operations(forward, load_unfold_table()), facts, training), facts


class Sequence3d(nn.Module):
    """A linear layer on (batch, tokens, features): ONNX exports it as MatMul + Add of the bias."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_first_layer_gets_no_data_gradient_and_the_rest_do(tmp_path: Path):
    mlp = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 5))
    step, facts = step_of(export(mlp, torch.randn(3, 12), tmp_path / "mlp.onnx"), 3)
    gemm_passes = sorted(step.pass_of(op.id) for op in step.operations if op.op_type == "Gemm")
    # two forward GEMMs, two weight gradients, one data gradient (the second layer's)
    assert gemm_passes == ["backward_a", "backward_b", "backward_b", "forward", "forward"]
    assert any("pruned" in note for note in step.notes)
    assert {name for name, _ in facts.parameters} == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_loss_and_optimizer_operations_follow_the_logits_and_parameter_shapes(tmp_path: Path):
    mlp = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 5))
    step, _ = step_of(export(mlp, torch.randn(3, 12), tmp_path / "mlp.onnx"), 7)
    loss = [op for op in step.operations if step.pass_of(op.id).startswith("loss")]
    assert [(op.op_type, op.param_dict["N"], op.param_dict["C"], op.param_dict["mode"]) for op in loss] == [
        ("SoftmaxCrossEntropyLoss", 7, 5, 0),
        ("SoftmaxCrossEntropyLoss", 7, 5, 1),
    ]
    updates = {
        (op.param_dict["H"], op.param_dict["W"]): op.count
        for op in step.operations
        if step.pass_of(op.id) == "optimizer"
    }
    assert updates == {(24, 12): 1, (1, 24): 1, (5, 24): 1, (1, 5): 1}
    assert {op.op_type for op in step.operations if step.pass_of(op.id) == "optimizer"} == {"SGD"}


def test_options_turn_the_training_additions_off(tmp_path: Path):
    mlp = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 5))
    options = {"prune_gradients": False, "loss": {"enabled": False}, "optimizer": {"enabled": False}}
    step, _ = step_of(export(mlp, torch.randn(3, 12), tmp_path / "mlp.onnx"), 3, options)
    assert {step.pass_of(op.id) for op in step.operations} == {"forward", "backward", "backward_a", "backward_b"}
    assert sum(1 for op in step.operations if step.pass_of(op.id) == "backward_a") == 2


def test_bias_add_after_a_matmul_is_fused_as_pytorch_runs_addmm(tmp_path: Path):
    step, _ = step_of(export(Sequence3d(), torch.randn(2, 6, 16), tmp_path / "seq.onnx"), 2)
    forward_types = sorted(op.op_type for op in step.operations if step.pass_of(op.id) == "forward")
    assert "Add" not in forward_types and "MatMul" in forward_types
    assert any("fused" in note for note in step.notes)
    matmul = next(op for op in step.operations if op.op_type == "MatMul" and step.pass_of(op.id) == "forward")
    assert (matmul.param_dict["M"], matmul.param_dict["K"], matmul.param_dict["N"]) == (12, 16, 32)


def test_a_weight_reaching_its_matmul_through_a_transpose_still_gets_its_gradient(tmp_path: Path):
    # a Linear on (batch, tokens, features) exported without constant folding: Transpose(weight) -> MatMul.
    # The transposed weight is folded like a constant, yet autograd differentiates through it to the weight.
    step, _ = step_of(export(Sequence3d(), torch.randn(2, 6, 16), tmp_path / "seq.onnx"), 2)
    passes = {step.pass_of(op.id): op for op in step.operations if op.op_type == "MatMul"}
    assert "backward_b" in passes, [note for note in step.notes if "pruned" in note]
    weight_gradient = passes["backward_b"].param_dict
    assert (weight_gradient["M"], weight_gradient["K"], weight_gradient["N"]) == (16, 12, 32)


def test_measured_step_is_the_median_unprofiled_step_after_warmup():
    batches = pd.DataFrame(
        {
            "step": range(8),
            "batch": range(8),
            "wall_s": [9.0, 5.0, 0.10, 0.50, 0.60, 0.12, 0.11, 0.13],
            "profiled": [0, 0, 0, 1, 1, 0, 0, 0],
        }
    )
    measured, profiled, steady = measured_step_ms(batches, warmup=2)
    assert measured == pytest.approx(115.0) and steady == 4
    assert profiled == pytest.approx(550.0)
    assert measured_step_ms(batches, warmup=6)[2] == 2, "warm-up steps never count as steady ones"


def test_prediction_sums_benchmark_time_times_occurrences_and_reports_shares(tmp_path: Path):
    mlp = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 5))
    step, _ = step_of(export(mlp, torch.randn(3, 12), tmp_path / "mlp.onnx"), 3)
    measurements = {}
    for op in step.operations:
        if op.op_type == "Gemm":
            measurements[op.id] = Measurement(op.id, TimeStats.from_samples([2.0]))
        elif op.op_type == "Relu":
            measurements[op.id] = Measurement(op.id, None, "no result row")
    assigned = {op.id: 1000.0 for op in step.operations if op.op_type in ("Gemm", "Relu")}
    frame = prediction_frame(step, measurements, {}, assigned)
    gemm_occurrences = sum(op.count for op in step.operations if op.op_type == "Gemm")
    assert frame["predicted_ms"].sum() == pytest.approx(2.0 * gemm_occurrences)
    assert set(frame.loc[frame["op_type"] == "Relu", "status"]) == {"failed"}
    assert set(frame.loc[frame["op_type"] == "SoftmaxCrossEntropyLoss", "status"]) == {"no benchmark"}

    profile = pd.DataFrame(
        [{"name": "aten::empty", "input_shapes": "[[]]", "calls": 1, "time_us": 500.0},
         {"name": "aten::mystery", "input_shapes": "[[]]", "calls": 1, "time_us": 250.0}]
    )  # fmt: skip
    match = match_profile(profile, step.operations, step.passes, load_table())
    profiled_ms = frame["in_training_ms"].sum() + 1.0
    metrics = prediction_metrics(frame, match, measured_ms=10.0, profiled_ms=profiled_ms)
    assert metrics["step_time_predicted_ms"] == pytest.approx(2.0 * gemm_occurrences)
    assert metrics["prediction_error_pct"] == pytest.approx(100 * (2.0 * gemm_occurrences - 10.0) / 10.0)
    assert metrics["unexplained_time_pct"] == pytest.approx(100 * 1.0 / profiled_ms)
    relu_ms = frame.loc[frame["op_type"] == "Relu", "in_training_ms"].sum()
    assert metrics["uncovered_time_pct"] == pytest.approx(100 * relu_ms / profiled_ms)
    per_type = op_type_frame(frame).set_index("op_type")
    assert bool(per_type.loc["Gemm", "covered"]) and not bool(per_type.loc["Relu", "covered"])
    breakdown = time_breakdown(frame, match, profiled_ms).set_index("part")
    assert breakdown.loc["framework", "ms"] == pytest.approx(0.5)
    assert breakdown.loc["unmatched operators", "ms"] == pytest.approx(0.25)
    assert math.isclose(breakdown.loc["Gemm forward", "share_pct"], 100 * 2.0 / profiled_ms)


def test_the_registered_sgd_benchmark_times_the_update_per_shape_and_refuses_an_empty_one(tmp_path: Path):
    from dlbench.core.values import Operation
    from dlbench.operators.registry import load_registry
    from dlbench.operators.runner import RunSettings, measure_operations
    from dlbench.operators.step_benchmarks import optimizer_benchmark

    options = (("tensors", 2), ("numel", 4096), ("momentum", 0.9), ("dampening", 0), ("nesterov", 0),
               ("weight_decay", 0), ("maximize", 0), ("foreach", 0), ("fused", 0))  # fmt: skip
    ops = [
        Operation(0, "SGD", (("N", 1), ("C", 1), ("H", 64), ("W", 32), *options)),
        Operation(1, "SGD", (("N", 1), ("C", 1), ("H", 0), ("W", 32), *options)),
    ]
    settings = RunSettings(warmup=1, min_reps=2, min_time_s=0, threads=1)
    result, _ = measure_operations(optimizer_benchmark(load_registry(), "cpu"), ops, settings, tmp_path)
    assert result.measurements[0].ok and result.measurements[0].stats.median_ms > 0
    assert not result.measurements[1].ok and "id 1: SGD cannot run: H=0.0 must be >= 1" in result.measurements[1].error
