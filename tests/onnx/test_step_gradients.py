"""Which tensors of an ONNX graph carry a gradient in training (``onnx/step.py`` ``graph_facts``), against what
torch's autograd does with the same operations: a Cast between float types keeps its gradient, a Cast to an
integer or a comparison drops it, and the unfolding derives a backward pass exactly where autograd runs one."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from dlbench.core.values import Operation
from dlbench.onnx.step import graph_facts
from dlbench.onnx.unfold import UnfoldError, load_table, unfold_operations

#: ONNX Cast targets and the torch dtypes of the same name
CASTS = {"half": (TensorProto.FLOAT16, torch.float16), "double": (TensorProto.DOUBLE, torch.float64),
         "bf16": (TensorProto.BFLOAT16, torch.bfloat16), "long": (TensorProto.INT64, torch.int64),
         "int8": (TensorProto.INT8, torch.int8), "bool": (TensorProto.BOOL, torch.bool)}  # fmt: skip


def weighted_casts(path: Path) -> Path:
    """``y = x @ w`` (w a trainable initializer), then every Cast of ``y`` and ``y > 0``."""
    w = numpy_helper.from_array(torch.randn(4, 4).numpy(), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    nodes += [helper.make_node("Cast", ["y"], [f"y_{n}"], name=f"cast_{n}", to=to) for n, (to, _) in CASTS.items()]
    nodes.append(helper.make_node("Greater", ["y", "y"], ["positive"], name="gt"))
    outputs = [helper.make_tensor_value_info(f"y_{n}", to, [2, 4]) for n, (to, _) in CASTS.items()]
    outputs.append(helper.make_tensor_value_info("positive", TensorProto.BOOL, [2, 4]))
    graph = helper.make_graph(
        nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])], outputs, [w]
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_cast_between_float_types_keeps_its_gradient_and_an_integer_cast_does_not(tmp_path: Path) -> None:
    facts = graph_facts(weighted_casts(tmp_path / "casts.onnx"))
    y = torch.randn(2, 4) @ torch.randn(4, 4, requires_grad=True)
    for name, (_, dtype) in CASTS.items():
        assert (f"y_{name}" in facts.requires_grad) == y.to(dtype).requires_grad, name
    assert ("positive" in facts.requires_grad) == (y > y).requires_grad  # False in both
    assert "y" in facts.requires_grad


def cast(to: int) -> Operation:
    return Operation(id=0, op_type="Cast", params=(("N", 1), ("C", 2), ("H", 3), ("W", 4), ("to", to), ("mode", 0)))


@pytest.mark.parametrize("name", sorted(CASTS))
def test_a_cast_unfolds_a_backward_pass_exactly_when_autograd_runs_one(name: str) -> None:
    to, dtype = CASTS[name]
    unfolded = unfold_operations([cast(to)], load_table())
    runs_backward = torch.randn(3, requires_grad=True).to(dtype).grad_fn is not None
    assert (len(unfolded.operations) == 2) == runs_backward, name


def test_a_rule_for_an_operator_without_gradient_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("strategies:\n  ArgMax:\n    - {pass: backward, set: {mode: 1}}\n")
    with pytest.raises(UnfoldError, match="ArgMax: its output carries no gradient"):
        load_table(path)
