"""Matching profiled PyTorch operators to ONNX operations: the table, shapes, nesting and a real profile."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from dlbench.analysis.match import (
    MatchError,
    load_table,
    match_profile,
    parse_table,
    profile_from_batches,
    profile_per_step,
)
from dlbench.core.descriptors import CONV, GEMM
from dlbench.core.values import Operation
from dlbench.training.instrument import ProfileSession, ProfileSettings


def conv_op(op_id: int, mode: int = 0, count: int = 1, n: int = 2) -> Operation:
    values = [n, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, mode]
    return Operation(op_id, "Conv", tuple(zip(CONV, values, strict=True)), count=count, nodes=(f"conv{op_id}",))


def gemm_op(op_id: int, m: int, k: int, n: int, trans_b: int = 0, count: int = 1) -> Operation:
    return Operation(op_id, "Gemm", tuple(zip(GEMM, [m, k, n, 0, trans_b, 1], strict=True)), count=count)


def profile(rows: list[tuple[str, list, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"name": n, "input_shapes": json.dumps(s), "calls": 1, "time_us": t} for n, s, t in rows],
        columns=["name", "input_shapes", "calls", "time_us"],
    )


CONV_SHAPES = [[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []]


def test_every_level_of_a_nested_convolution_counts_once_for_the_same_operation():
    ops = [conv_op(0)]
    rows = profile(
        [
            ("aten::conv2d", CONV_SHAPES, 5.0),
            ("aten::convolution", CONV_SHAPES, 3.0),
            ("aten::_convolution", CONV_SHAPES, 2.0),
            ("aten::mkldnn_convolution", CONV_SHAPES[:7], 90.0),
            ("aten::empty", [[]], 1.0),
        ]
    )
    result = match_profile(rows, ops, {0: "forward"}, load_table())
    assert result.assigned_us == {0: pytest.approx(100.0)}
    assert result.total_us("framework") == pytest.approx(1.0)
    assert result.total_us("unmatched") == 0


def test_convolution_backward_is_split_between_its_data_and_weight_passes_by_benchmark_time():
    ops = [conv_op(0), conv_op(1, mode=1), conv_op(2, mode=2)]
    passes = {0: "forward", 1: "backward_data", 2: "backward_weights"}
    rows = profile([("aten::convolution_backward", [[2, 4, 8, 8], [2, 3, 8, 8], [4, 3, 3, 3], [], []], 300.0)])
    result = match_profile(rows, ops, passes, load_table(), weights={0: 1.0, 1: 1.0, 2: 2.0})
    assert result.assigned_us == {1: pytest.approx(100.0), 2: pytest.approx(200.0)}
    # without weights for every candidate, occurrences decide
    result = match_profile(rows, ops, passes, load_table(), weights={1: 1.0})
    assert result.assigned_us == {1: pytest.approx(150.0), 2: pytest.approx(150.0)}


def test_gemm_calls_match_up_to_transposition_and_pass():
    # y = x W^T (x 8x16, W 32x16): forward, dX = dY W (8x32 @ 32x16), dW = dY^T x (32x8 @ 8x16)
    ops = [gemm_op(0, 8, 16, 32, trans_b=1), gemm_op(1, 8, 32, 16), gemm_op(2, 16, 8, 32)]
    passes = {0: "forward", 1: "backward_a", 2: "backward_b"}
    rows = profile(
        [
            ("aten::addmm", [[32], [8, 16], [16, 32], [], []], 10.0),
            ("aten::mm", [[8, 32], [32, 16]], 20.0),
            ("aten::mm", [[32, 8], [8, 16]], 30.0),  # the weight gradient, transposed relative to ONNX's
        ]
    )
    result = match_profile(rows, ops, passes, load_table())
    assert result.assigned_us == {0: 10.0, 1: 20.0, 2: 30.0}


def test_a_call_of_a_shape_no_operation_has_is_unmatched_with_the_reason():
    rows = profile([("aten::mkldnn_convolution", [[2, 3, 16, 16], [4, 3, 3, 3], []], 50.0), ("aten::weird", [], 7.0)])
    result = match_profile(rows, [conv_op(0)], {}, load_table())
    assert result.assigned_us == {}
    unmatched = result.unmatched().set_index("name")
    assert unmatched.loc["aten::mkldnn_convolution", "time_us"] == 50.0
    assert "H=16" in unmatched.loc["aten::mkldnn_convolution", "reason"]
    assert unmatched.loc["aten::weird", "reason"] == "no rule in the match table"


def test_operations_of_zero_occurrences_are_never_candidates():
    rows = profile([("aten::mkldnn_convolution", CONV_SHAPES[:3], 50.0)])
    result = match_profile(rows, [conv_op(0, count=0)], {}, load_table())
    assert result.total_us("unmatched") == 50.0


def test_profile_per_step_takes_the_median_over_batches_and_counts_missing_rows_as_zero():
    rows = pd.DataFrame(
        [
            {"batch": 5, "name": "aten::mm", "input_shapes": "[[2,2],[2,2]]", "calls": 2, "self_cpu_us": 10.0},
            {"batch": 6, "name": "aten::mm", "input_shapes": "[[2,2],[2,2]]", "calls": 2, "self_cpu_us": 30.0},
            {"batch": 7, "name": "aten::mm", "input_shapes": "[[2,2],[2,2]]", "calls": 2, "self_cpu_us": 20.0},
            {"batch": 7, "name": "aten::relu", "input_shapes": "[[2,2]]", "calls": 1, "self_cpu_us": 9.0},
        ]
    )
    frame = profile_from_batches(rows).set_index("name")
    assert frame.loc["aten::mm", "time_us"] == 20.0
    assert frame.loc["aten::relu", "time_us"] == 0.0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"operators": {"aten::mm": {"op_type": "Gemm", "shapes": "sideways"}}},
            "operators.aten::mm: shapes='sideways'",
        ),
        ({"operators": {"aten::mm": {"passes": ["forward"]}}}, "operators.aten::mm: op_type is required"),
        ({"operators": {"aten::mm": {"op_type": "Gemm", "colour": 1}}}, "unknown key(s) colour"),
        ({"rules": {}}, "top-level 'operators' map"),
    ],
)
def test_bad_table_entries_are_named(table, message):
    with pytest.raises(MatchError, match=None) as info:
        parse_table(table, "my_table.yaml")
    assert "my_table.yaml" in str(info.value) and message in str(info.value)


def test_shipped_table_loads_and_names_every_conv_level():
    table = load_table()
    for name in ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"):
        assert table.rules[name].op_types == ("Conv",)
        assert table.rules[name].passes == ("forward",)
    assert table.is_framework("autograd::engine::evaluate_function: ConvolutionBackward0")
    assert not table.is_framework("aten::mm")


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


def profile_and_export(tmp_path: Path) -> tuple[Path, Path]:
    """Train TinyNet for two steps with the second profiled; export it to ONNX."""
    torch.manual_seed(0)
    model = TinyNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=tmp_path / "profile"))
    for step in range(2):
        with session.batch(step):
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    session.finish()
    onnx_path = tmp_path / "tiny.onnx"
    model.eval()
    torch.onnx.export(
        model, (x,), str(onnx_path), opset_version=17, dynamo=False,
        training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
    )  # fmt: skip
    return tmp_path / "profile", onnx_path


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_real_profile_of_a_tiny_network_matches_its_compute_operators(tmp_path: Path):
    from dlbench.onnx.extract import extract_operations
    from dlbench.onnx.opdb import deduplicate
    from dlbench.onnx.step import graph_facts, training_step
    from dlbench.onnx.unfold import load_table as load_unfold_table
    from dlbench.onnx.unfold import unfold_operations

    profile_dir, onnx_path = profile_and_export(tmp_path)
    extraction = extract_operations(onnx_path, 4)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(onnx_path, 4).with_inferred_outputs(extraction.nodes)
    step = training_step(forward, unfold_operations(forward, load_unfold_table()), facts, load_table().training)
    result = match_profile(profile_per_step(profile_dir), step.operations, step.passes, load_table())

    matched = result.rows[result.rows["status"] == "matched"]
    kinds = set(matched["category"])
    for expected in ("Conv/forward", "BatchNormalization/forward", "BatchNormalization/backward", "Relu/forward",
                     "Relu/backward", "Gemm/forward", "SoftmaxCrossEntropyLoss/loss_forward",
                     "SoftmaxCrossEntropyLoss/loss_backward", "SGD/optimizer"):  # fmt: skip
        assert expected in kinds, f"{expected} not matched; matched: {sorted(kinds)}"
    assert any(c.startswith("Conv/backward") for c in kinds)
    # the convolution's input is the network input: no data gradient is computed, nor predicted
    conv_passes = {step.pass_of(op.id) for op in step.operations if op.op_type == "Conv"}
    assert conv_passes == {"forward", "backward_weights"}
    # every forward operation of a benchmarked op_type got profiled time
    for op in step.operations:
        if op.op_type in ("Conv", "BatchNormalization", "Relu", "Gemm"):
            assert result.assigned_us.get(op.id, 0) > 0, f"{op.label} ({step.pass_of(op.id)}) got no time"
    unmatched_compute = result.unmatched()
    assert result.total_us("unmatched") < 0.2 * result.total_us(), unmatched_compute.to_string()


def test_a_name_with_a_rule_and_a_framework_entry_is_framework_when_no_operation_fits():
    loss = Operation(0, "SoftmaxCrossEntropyLoss", (("N", 4), ("C", 10), ("mode", 1)))
    rows = profile([("aten::fill_", [[4, 10], []], 6.0), ("aten::fill_", [[64], []], 2.0)])
    result = match_profile(rows, [loss], {0: "loss_backward"}, load_table())
    assert result.assigned_us == {0: 6.0}
    assert result.total_us("framework") == 2.0 and result.total_us("unmatched") == 0
