"""The PyTorch kernels of the glue operators compute what torch's own operators compute, forward and backward
(against autograd), for the shapes their canonical parameters describe; their costs and memory estimates
follow the tensors they read and write."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dlbench.backends.torch import kernels as tk
from dlbench.backends.torch.memory import memory_problem, tensor_bytes
from dlbench.backends.torch.params import Pass, UnsupportedRow
from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.glue import GLUE_OP_TYPES
from dlbench.operators.protocol import parse_output
from dlbench.operators.registry import load_registry

CPU, F32 = torch.device("cpu"), torch.float32
X = dict(N=2, C=3, H=4, W=5)


def bshape(prefix: str, shape: Sequence[int]) -> dict[str, int]:
    return {f"{d}{prefix}": s for d, s in zip("NCHW", shape, strict=True)}


def lrn_reference(x: torch.Tensor, size: int, alpha: float, beta: float, bias: float) -> torch.Tensor:
    """ONNX's definition, written out: the sum of squares over the channels c - (size-1)//2 .. c + size//2."""
    squares = x * x
    channels = x.shape[1]
    total = torch.zeros_like(x)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        total[:, c] = squares[:, lo : hi + 1].sum(1)
    return x / (bias + alpha / size * total) ** beta


def gather_reference(data4: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
    return data4.movedim(axis, 0)[indices].movedim(0, axis)


# op_type, parameters (mode added per case), reference forward on the pass's inputs, differentiable inputs,
# expected output shapes
CASES: list[tuple[str, dict, Callable[..., object], list[int], list[tuple[int, ...]]]] = [
    ("Sqrt", X, torch.sqrt, [0], [(2, 3, 4, 5)]),
    ("Erf", X, torch.special.erf, [0], [(2, 3, 4, 5)]),
    ("Tanh", X, torch.tanh, [0], [(2, 3, 4, 5)]),
    ("Sigmoid", X, lambda x: 1 / (1 + torch.exp(-x)), [0], [(2, 3, 4, 5)]),
    ("Exp", X, torch.exp, [0], [(2, 3, 4, 5)]),
    ("Log", X, torch.log, [0], [(2, 3, 4, 5)]),
    ("Neg", X, lambda x: -x, [0], [(2, 3, 4, 5)]),
    ("Clip", X, lambda x: torch.minimum(torch.maximum(x, torch.tensor(-1.0)), torch.tensor(1.0)), [0], [(2, 3, 4, 5)]),
    (
        "Gelu",
        {**X, "approximate": 0},
        lambda x: 0.5 * x * (1 + torch.special.erf(x / math.sqrt(2))),
        [0],
        [(2, 3, 4, 5)],
    ),
    ("Gelu", {**X, "approximate": 1}, lambda x: F.gelu(x, approximate="tanh"), [0], [(2, 3, 4, 5)]),
    ("Cast", {**X, "to": 11}, lambda x: x.double(), [0], [(2, 3, 4, 5)]),
    ("Mul", {**X, **bshape("_b", (1, 3, 1, 5))}, lambda a, b: a * b, [0, 1], [(2, 3, 4, 5)]),
    ("Div", {**X, **bshape("_b", (1, 1, 4, 1))}, lambda a, b: a / b, [0, 1], [(2, 3, 4, 5)]),
    ("Sub", {**bshape("", (1, 1, 1, 5)), **bshape("_b", (2, 3, 4, 5))}, lambda a, b: a - b, [0, 1], [(2, 3, 4, 5)]),
    ("Pow", {**X, **bshape("_b", (1, 1, 1, 1))}, torch.pow, [0], [(2, 3, 4, 5)]),
    ("Pow", {**X, **bshape("_b", (2, 3, 4, 5))}, torch.pow, [0], [(2, 3, 4, 5)]),
    ("Sum", {**X, **bshape("_b", (1, 3, 4, 5)), "inputs": 3}, lambda a, b, c: a + b + c, [0, 1, 2], [(2, 3, 4, 5)]),
    (
        "Max",
        {**X, **bshape("_b", (2, 3, 4, 5)), "inputs": 3},
        lambda *xs: torch.stack(xs).amax(0),
        [0, 1, 2],
        [(2, 3, 4, 5)],
    ),
    (
        "Min",
        {**X, **bshape("_b", (2, 3, 1, 5)), "inputs": 2},
        lambda *xs: torch.stack(torch.broadcast_tensors(*xs)).amin(0),
        [0, 1],
        [(2, 3, 4, 5)],
    ),
    (
        "Where",
        {**bshape("", (2, 1, 4, 5)), **bshape("_b", (2, 3, 4, 5)), **bshape("_c", (1, 1, 1, 5))},
        lambda c, x, y: c * x + (~c) * y,
        [1, 2],
        [(2, 3, 4, 5)],
    ),
    (
        "Concat",
        {**bshape("", (2, 7, 4, 5)), "axis": 1, "inputs": 3},
        lambda *xs: torch.cat(xs, 1),
        [0, 1, 2],
        [(2, 7, 4, 5)],
    ),
    ("Split", {**X, "axis": 3, "outputs": 2}, lambda x: (x[..., :3], x[..., 3:]), [0], [(2, 3, 4, 3), (2, 3, 4, 2)]),
    ("Slice", {**X, **bshape("_out", (2, 3, 4, 3))}, lambda x: x[..., :3], [0], [(2, 3, 4, 3)]),
    ("Slice", {**X, **bshape("_out", (1, 2, 4, 3))}, lambda x: x[:1, :2, :, :3], [0], [(1, 2, 4, 3)]),
    (
        "Transpose",
        {**X, "perm_0": 0, "perm_1": 2, "perm_2": 3, "perm_3": 1},
        lambda x: x.permute(0, 2, 3, 1),
        [0],
        [(2, 4, 5, 3)],
    ),
    (
        "Gather",
        {**bshape("", (1, 1, 10, 6)), "axis": 2, "indices": 7},
        lambda table, i: gather_reference(table.reshape(1, 1, 10, 6), i, 2).reshape(7, 6),
        [0],
        [(7, 6)],
    ),
    ("Gather", {**X, "axis": 1, "indices": 6}, lambda d, i: gather_reference(d, i, 1), [0], [(2, 6, 4, 5)]),
    (
        "Expand",
        {**bshape("", (2, 1, 4, 1)), **bshape("_out", (2, 3, 4, 5))},
        lambda x: x * torch.ones(2, 3, 4, 5),
        [0],
        [(2, 3, 4, 5)],
    ),
    ("Tile", {**X, "repeats_1": 2, "repeats_3": 3}, lambda x: torch.tile(x, (1, 2, 1, 3)), [0], [(2, 6, 4, 15)]),
    (
        "ReduceMean",
        {**X, "reduce_C": 1, "reduce_W": 1},
        lambda x: x.sum((1, 3), keepdim=True) / 15,
        [0],
        [(2, 1, 4, 1)],
    ),
    ("ReduceSum", {**X, "reduce_N": 1, "reduce_H": 1}, lambda x: x.sum((0, 2), keepdim=True), [0], [(1, 3, 1, 5)]),
    (
        "LRN",
        {**bshape("", (2, 6, 3, 3)), "size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 1.0},
        lambda x: lrn_reference(x, 3, 1e-2, 0.75, 1.0),
        [0],
        [(2, 6, 3, 3)],
    ),
    (
        "GatherElements",
        {**X, **bshape("_b", (2, 3, 7, 5)), "axis": 2},
        lambda d, i: d[torch.arange(2).view(2, 1, 1, 1), torch.arange(3).view(1, 3, 1, 1), i, torch.arange(5)],
        [0],
        [(2, 3, 7, 5)],
    ),
]
IDS = [f"{op}-{i}" for i, (op, *_) in enumerate(CASES)]

# boolean results: forward only
LOGIC_CASES: list[tuple[str, dict, Callable[..., object]]] = [
    ("Equal", {**X, **bshape("_b", (1, 3, 1, 5))}, lambda a, b: (a - b).abs() == 0),
    ("Greater", {**X, **bshape("_b", (1, 1, 1, 1))}, lambda a, b: (a - b) > 0),
    ("Less", {**X, **bshape("_b", (2, 3, 4, 5))}, lambda a, b: (b - a) > 0),
    ("GreaterOrEqual", {**X, **bshape("_b", (2, 1, 4, 5))}, lambda a, b: ~((a - b) < 0)),
    ("LessOrEqual", {**X, **bshape("_b", (2, 1, 4, 5))}, lambda a, b: ~((a - b) > 0)),
    ("And", {**X, **bshape("_b", (1, 3, 4, 1))}, lambda a, b: a * b),
    ("Or", {**X, **bshape("_b", (1, 3, 4, 1))}, lambda a, b: (a.int() + b.int()) > 0),
    ("Xor", {**X, **bshape("_b", (1, 3, 4, 1))}, lambda a, b: a != b),
    ("Not", X, lambda a: a == 0),
    ("IsNaN", X, lambda a: a != a),
    ("IsInf", X, lambda a: a.abs() == math.inf),
]


def as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)  # type: ignore[arg-type]


@pytest.mark.parametrize(("op_type", "params", "reference", "differentiable", "shapes"), CASES, ids=IDS)
def test_forward_equals_torchs_own_operators(op_type, params, reference, differentiable, shapes) -> None:
    torch.manual_seed(0)
    timed = tk.KERNELS[op_type]({**params, "mode": 0}, CPU, F32)
    assert isinstance(timed, Pass)
    got = as_tuple(timed())
    expected = as_tuple(reference(*timed.inputs))
    assert [tuple(t.shape) for t in got] == shapes
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e.to(g.dtype), rtol=1e-5, atol=1e-6)
        assert g.is_contiguous()  # every output is written, not a view


@pytest.mark.parametrize(("op_type", "params", "reference", "differentiable", "shapes"), CASES, ids=IDS)
def test_backward_equals_autograd_of_torchs_own_operators(op_type, params, reference, differentiable, shapes) -> None:
    torch.manual_seed(0)
    timed = tk.KERNELS[op_type]({**params, "mode": 1}, CPU, F32)
    got = as_tuple(timed())
    leaves = [t.detach().clone().requires_grad_(i in differentiable) for i, t in enumerate(timed.inputs)]
    outputs = as_tuple(reference(*leaves))
    assert len(timed.grad_outputs) == len(outputs)
    expected = torch.autograd.grad(outputs, [leaves[i] for i in differentiable], timed.grad_outputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op_type", "params", "reference"), LOGIC_CASES, ids=[c[0] for c in LOGIC_CASES])
def test_comparisons_logic_and_predicates_give_torchs_booleans_and_refuse_a_backward(op_type, params, reference):
    torch.manual_seed(0)
    timed = tk.KERNELS[op_type]({**params, "mode": 0}, CPU, F32)
    got = timed()
    assert got.dtype == torch.bool and got.shape == (2, 3, 4, 5)
    torch.testing.assert_close(got, reference(*timed.inputs).expand(2, 3, 4, 5))
    if op_type == "Equal":
        assert 0 < got.float().mean() < 1  # operands that are sometimes equal
    with pytest.raises(UnsupportedRow, match="no gradient"):
        tk.KERNELS[op_type]({**params, "mode": 1}, CPU, F32)


def test_a_casts_output_has_the_target_type_and_integer_targets_have_no_gradient() -> None:
    out = tk.cast({**X, "to": 7, "mode": 0}, CPU, F32)()
    assert out.dtype == torch.int64 and out.shape == (2, 3, 4, 5)
    assert tk.cast({**X, "to": 10, "mode": 0}, CPU, F32)().dtype == torch.float16
    with pytest.raises(UnsupportedRow, match="no gradient"):
        tk.cast({**X, "to": 9, "mode": 1}, CPU, F32)
    with pytest.raises(UnsupportedRow, match="to=8"):
        tk.cast({**X, "to": 8, "mode": 0}, CPU, F32)  # strings


@pytest.mark.parametrize(
    ("op_type", "params", "message"),
    [
        ("Mul", {**X, **bshape("_b", (1, 2, 1, 1))}, "do not broadcast"),
        ("Slice", {**X, **bshape("_out", (2, 3, 4, 6))}, "larger than the input"),
        ("Concat", {**X, "axis": 1, "inputs": 4}, "4 parts of a dimension of size 3"),
        ("Transpose", {**X, "perm_0": 0, "perm_1": 0, "perm_2": 2, "perm_3": 3}, "not a permutation"),
        ("ReduceSum", {**X, "reduce_C": 2}, "each is 0 or 1"),
        ("Gather", {**X, "axis": 4}, "outside a rank-4 tensor"),
        ("Exp", {**X, "mode": 2}, "mode=2"),
    ],
)
def test_parameters_that_describe_no_operation_fail_the_row_with_the_reason(op_type, params, message) -> None:
    with pytest.raises(UnsupportedRow, match=message):
        tk.KERNELS[op_type](params, CPU, F32)


def test_every_glue_operator_has_a_kernel_and_a_registry_entry_with_its_descriptors() -> None:
    registry = load_registry()
    for op_type in GLUE_OP_TYPES:
        assert op_type in tk.KERNELS
        (entry,) = registry.serving(op_type, backend="torch")
        assert list(entry.param_descr) == DESCRIPTORS[op_type]
        assert entry.command[-1] == op_type


@pytest.mark.parametrize(
    ("op_type", "params", "flops", "moved"),
    [
        # out 2x3x4x5 = 120; B 1x3x1x5 = 15: read A, B, write out
        ("Mul", {**X, **bshape("_b", (1, 3, 1, 5)), "mode": 0}, 120, 4 * (120 + 15 + 120)),
        # backward: read the gradient (120) and A, B; write dA, dB; 2 FLOPs per output element
        ("Mul", {**X, **bshape("_b", (1, 3, 1, 5)), "mode": 1}, 240, 4 * (120 + 2 * (120 + 15))),
        ("Sum", {**X, **bshape("_b", (2, 3, 4, 5)), "inputs": 3, "mode": 0}, 240, 4 * (4 * 120)),
        ("Exp", {**X, "mode": 0}, 120, 4 * 240),
        ("Exp", {**X, "mode": 1}, 120, 4 * 360),
        ("Cast", {**X, "to": 10, "mode": 0}, 0, 120 * (4 + 2)),
        ("Concat", {**bshape("", (2, 7, 4, 5)), "axis": 1, "inputs": 3, "mode": 0}, 0, 4 * 2 * 280),
        ("Transpose", {**X, "perm_0": 0, "perm_1": 2, "perm_2": 3, "perm_3": 1, "mode": 0}, 0, 4 * 240),
        # Gather of 7 rows of 6 from a 10x6 table: read and write 42 values, read 7 int64 indices
        ("Gather", {**bshape("", (1, 1, 10, 6)), "axis": 2, "indices": 7, "mode": 0}, 0, 4 * 84 + 8 * 7),
        # its gradient: read 42, write the 60-value table, read the indices; add the 42 rows
        ("Gather", {**bshape("", (1, 1, 10, 6)), "axis": 2, "indices": 7, "mode": 1}, 42, 4 * 102 + 8 * 7),
        ("Expand", {**bshape("", (2, 1, 4, 1)), **bshape("_out", (2, 3, 4, 5)), "mode": 1}, 112, 4 * 128),
        ("ReduceMean", {**X, "reduce_C": 1, "reduce_W": 1, "mode": 0}, 120, 4 * (120 + 8)),
        ("LRN", {**X, "size": 5, "mode": 0}, 13 * 120, 4 * 240),
        ("Where", {**X, **bshape("_b", (2, 3, 4, 5)), **bshape("_c", (2, 3, 4, 5)), "mode": 0}, 120, 120 + 4 * 360),
        # a boolean result is one byte per element; there is no backward pass
        ("Equal", {**X, **bshape("_b", (1, 3, 1, 5)), "mode": 0}, 120, 4 * (120 + 15) + 120),
        ("Equal", {**X, **bshape("_b", (1, 3, 1, 5)), "mode": 1}, 0, 0),
        ("And", {**X, **bshape("_b", (2, 3, 4, 5)), "mode": 0}, 120, 3 * 120),
        # GatherElements reads as many values as it writes, plus one int64 index each
        ("GatherElements", {**X, **bshape("_b", (2, 3, 7, 5)), "axis": 2, "mode": 0}, 0, 2 * 4 * 210 + 8 * 210),
    ],
)
def test_flops_and_bytes_follow_the_tensors_read_and_written(op_type, params, flops, moved) -> None:
    assert operation_cost(op_type, params) == (flops, moved)


def test_invalid_parameters_cost_nothing_rather_than_raise() -> None:
    assert operation_cost("Mul", {**X, **bshape("_b", (1, 2, 1, 1))}) == (0.0, 0.0)


def test_the_memory_guard_sizes_glue_operations_and_skips_those_that_do_not_fit() -> None:
    forward = tensor_bytes("Concat", {**bshape("", (8, 64, 56, 56)), "axis": 1, "inputs": 2, "mode": 0}, 4)
    assert forward == 2 * 8 * 64 * 56 * 56 * 4
    backward = tensor_bytes("Concat", {**bshape("", (8, 64, 56, 56)), "axis": 1, "inputs": 2, "mode": 1}, 4)
    assert backward == 3 * forward
    huge = {**bshape("", (1024, 1024, 1024, 64)), **bshape("_b", (1024, 1024, 1024, 64)), "mode": 0}
    assert "skipped" in memory_problem(tensor_bytes("Mul", huge, 4), 16 * 2**30, 0.8)
    with pytest.raises(UnsupportedRow):
        tensor_bytes("Slice", {**X, **bshape("_out", (9, 9, 9, 9))}, 4)


def test_the_protocol_run_measures_glue_rows_and_reports_a_bad_row_by_id(tmp_path: Path) -> None:
    from test_torch_kernels import run_kernel

    good = [2, 3, 4, 5, 2, 3, 4, 3, 0]
    bad = [2, 3, 4, 5, 2, 3, 4, 9, 0]
    code, out, stderr = run_kernel("Slice", [(0, good), (1, bad), (2, [*good[:-1], 1])], tmp_path)
    assert code == 0
    assert sorted(parse_output(out, [0, 1, 2]).rows) == [0, 2]
    assert "id 1: Slice cannot run: Slice: output [2, 3, 4, 9] is larger than the input [2, 3, 4, 5]" in stderr
