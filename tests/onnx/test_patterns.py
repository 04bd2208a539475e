"""The exported GELU (Div, Erf, Add, Mul, Mul) becomes one Gelu operation when the profile shows PyTorch's own
GELU ran, and stays five operations when it did not (a GELU written out by hand runs five kernels)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from dlbench.backends.torch import kernels as tk
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.patterns import GELU_OPERATOR, exported_gelus, fuse_exported_gelus
from dlbench.onnx.unfold import load_table, unfold_operations


class Block(nn.Module):
    """Two GELU MLPs and an attention-like scaling (a Div that is no GELU's)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down, self.again = nn.Linear(8, 16), nn.Linear(16, 8), nn.Linear(8, 16)
        self.gelu = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = x / math.sqrt(8.0)
        return self.gelu(self.again(self.down(self.gelu(self.up(scaled)))))


class HandWritten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def export(model: nn.Module, path: Path, width: int = 8) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.randn(4, width),), str(path), opset_version=17, dynamo=False,
                          dynamic_axes={"x": {0: "batch"}}, input_names=["x"])  # fmt: skip
    return path


def test_each_exported_gelu_becomes_one_gelu_operation_when_pytorchs_gelu_ran(tmp_path: Path):
    path = export(Block(), tmp_path / "block.onnx")
    patterns = exported_gelus(path)
    assert len(patterns) == 2 and all(len(p.nodes) == 5 and p.approximate == 0 for p in patterns)
    forward = deduplicate(extract_operations(path, 4).operations())
    fused, notes = fuse_exported_gelus(forward, path, {GELU_OPERATOR, "aten::addmm"})
    types = [op.op_type for op in fused]
    assert "Erf" not in types and "Mul" not in types
    assert sum(op.count for op in fused if op.op_type == "Div") == 1  # the scaling stays
    gelus = {op.param_dict["W"]: op for op in fused if op.op_type == "Gelu"}
    assert set(gelus) == {16} and gelus[16].count == 2 and gelus[16].param_dict["approximate"] == 0
    assert gelus[16].flops and "2 exported Div-Erf-Add-Mul-Mul pattern(s)" in notes[0]
    # its backward is the one gelu_backward PyTorch runs
    unfolded = unfold_operations(fused, load_table())
    (backward,) = [op for op in unfolded.operations if op.op_type == "Gelu" and unfolded.pass_of(op.id) == "backward"]
    assert backward.param_dict["mode"] == 1 and backward.count == 2
    timed = tk.KERNELS["Gelu"](backward.param_dict, torch.device("cpu"), torch.float32)
    x = timed.inputs[0].detach().requires_grad_()
    (expected,) = torch.autograd.grad(HandWritten()(x), [x], timed.grad_outputs)
    torch.testing.assert_close(timed(), expected, rtol=1e-4, atol=1e-5)


def test_without_pytorchs_gelu_in_the_profile_the_five_operations_stay(tmp_path: Path):
    path = export(Block(), tmp_path / "block.onnx")
    forward = deduplicate(extract_operations(path, 4).operations())
    fused, notes = fuse_exported_gelus(forward, path, {"aten::erf", "aten::mul"})
    assert fused == list(forward) and notes == []


@pytest.mark.parametrize("model", [HandWritten(), nn.Sequential(nn.Linear(8, 8), nn.Tanh())])
def test_graphs_of_another_shape_have_no_gelu_pattern(tmp_path: Path, model: nn.Module):
    # the hand-written GELU is exported as Div, Erf, Add, then Mul by 0.5 before the Mul by x: not PyTorch's
    assert exported_gelus(export(model, tmp_path / "m.onnx")) == []


class TanhBlock(nn.Module):
    """GELU's tanh form, as GPT-2-style scripts call it, beside a plain Tanh that is no GELU's."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.down(nn.functional.gelu(self.up(x), approximate="tanh")))


def test_the_tanh_form_of_gelu_becomes_one_gelu_operation_with_its_approximation(tmp_path: Path):
    path = export(TanhBlock(), tmp_path / "tanh.onnx")
    (pattern,) = exported_gelus(path)
    assert len(pattern.nodes) == 9 and pattern.approximate == 1
    forward = deduplicate(extract_operations(path, 4).operations())
    fused, notes = fuse_exported_gelus(forward, path, {GELU_OPERATOR})
    assert "Mul" not in [op.op_type for op in fused] and "Add" not in [op.op_type for op in fused]
    (tanh,) = [op for op in fused if op.op_type == "Tanh"]  # the network's own Tanh stays
    assert tanh.param_dict["W"] == 8 and tanh.count == 1
    (gelu,) = [op for op in fused if op.op_type == "Gelu"]
    assert gelu.param_dict["W"] == 16 and gelu.param_dict["approximate"] == 1 and "tanh-form" in notes[0]
    # forward and backward as PyTorch computes the tanh form
    unfolded = unfold_operations(fused, load_table())
    (backward,) = [op for op in unfolded.operations if op.op_type == "Gelu" and unfolded.pass_of(op.id) == "backward"]
    timed = tk.KERNELS["Gelu"](backward.param_dict, torch.device("cpu"), torch.float32)
    x = timed.inputs[0].detach().requires_grad_()
    (expected,) = torch.autograd.grad(nn.functional.gelu(x, approximate="tanh"), [x], timed.grad_outputs)
    torch.testing.assert_close(timed(), expected, rtol=1e-4, atol=1e-5)
