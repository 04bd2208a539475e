"""Each GEMM of a real profiled step is benchmarked in the orientation and with the operand layouts it ran: a
bias-free Linear exports as a MatMul against its weight stored transposed, while the step computed
``x @ w.t()``; autograd's weight gradient is ``grad.t() @ x``. The kernel PyTorch picks depends on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from dlbench.analysis.ran_as_gemm import call_product
from dlbench.training.trace import input_formats
from tests.analysis.test_ran_as import evaluated_step


class BiasFree(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(24, 40, bias=False), nn.Linear(40, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def _layouts(a: torch.Tensor, b: torch.Tensor) -> str:
    return json.dumps(input_formats([list(a.shape), list(b.shape)], [list(a.stride()), list(b.stride())]))


def test_a_products_operands_read_as_torch_lays_them_out():
    x, w = torch.randn(6, 5), torch.randn(7, 5)
    # linear(x, w) computes x @ w.t(): B is the weight transposed, unless the weight itself is a transposed view
    assert call_product("gemm_linear", "[[6,5],[7,5]]", _layouts(x, w)) == (6, 7, 0, 1)
    assert call_product("gemm_linear", "[[6,5],[7,5]]", _layouts(x, torch.randn(5, 7).t())) == (6, 7, 0, 0)
    g = torch.randn(6, 7)
    # the weight gradient: grad.t() @ x, A a transposed view
    at = g.t()
    assert call_product("gemm_mm", "[[7,6],[6,5]]", _layouts(at, x)) == (7, 5, 1, 0)
    assert call_product("gemm_mm", "[[6,7],[7,5]]", _layouts(g, w)) == (6, 5, 0, 0)
    # a batch of rows against one matrix is one product of the rows
    assert call_product("gemm_matmul", "[[2,3,5],[5,7]]", '["",""]') == (6, 7, 0, 0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_every_gemm_of_a_step_is_posed_as_autograd_ran_it(tmp_path: Path):
    step, ran, table, *_ = evaluated_step(tmp_path, "none", channels_last=False, net=BiasFree, input_shape=(4, 24))
    posed = {(ran.pass_of(op.id), op.param_dict["M"], op.param_dict["K"], op.param_dict["N"]):
             (op.param_dict.get("transA", 0), op.param_dict.get("transB", 0))
             for op in ran.operations if op.op_type in ("Gemm", "MatMul")}  # fmt: skip
    # forward: x @ w.t() (the graph's MatMul reads the weight already transposed: no transpose there)
    assert posed[("forward", 4, 24, 40)] == (0, 1) and posed[("forward", 4, 40, 10)] == (0, 1)
    before = {(op.param_dict["M"], op.param_dict["N"]): op.param_dict.get("transB", 0)
              for op in step.operations if op.op_type == "MatMul" and step.pass_of(op.id) == "forward"}  # fmt: skip
    assert before == {(4, 40): 0, (4, 10): 0}
    # backward: the input's gradient grad @ w (both as stored), the weight's grad.t() @ x (A transposed), its
    # product the weight's shape (out x in) as torch computes it
    weight_grads = {key: value for key, value in posed.items() if key[0] != "forward" and value[0] == 1}
    assert {(m, n) for _, m, _, n in weight_grads} == {(40, 24), (10, 40)}
    assert set(weight_grads.values()) == {(1, 0)}
    assert set(table.loc[table["op_type"] == "MatMul", "gemm"]) >= {"M=4 N=40 transA=0 transB=1"}


class Square(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(16, 32), nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_gemms_of_one_problem_share_out_the_calls_that_ran_it(tmp_path: Path):
    # the square layer's forward x @ w.t() and its input gradient grad @ w are one problem (M=4, K=32, N=32):
    # the match gives both calls to both operations; each operation is posed as one of them ran, not both as
    # the slower one (bfloat16 without instructions ran grad @ w 37x slower than x @ w.t() at 2048 x 2048)
    _, ran, *_ = evaluated_step(tmp_path, "none", channels_last=False, net=Square, input_shape=(4, 16))
    posed = {ran.pass_of(op.id): (op.param_dict.get("transA", 0), op.param_dict.get("transB", 0))
             for op in ran.operations if op.op_type == "Gemm" and op.param_dict["K"] == 32
             and op.param_dict["M"] == 4 and op.param_dict["N"] == 32}  # fmt: skip
    assert posed == {"forward": (0, 1), "backward_a": (0, 0)}
