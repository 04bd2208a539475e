"""One input's gradient alone (``mode`` 3 + i): the torch kernels of the broadcasting operators compute exactly
the gradient autograd gives that input, and nothing for the others (training differentiates only the inputs
that need a gradient, so ``x / constant`` runs one division, not the constant's gradient too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch.profiler import profile

from dlbench.backends.torch import kernels as tk
from dlbench.backends.torch.params import UnsupportedRow
from dlbench.core.descriptors import operation_cost

CPU, F32 = torch.device("cpu"), torch.float32


def shape(prefix: str, dims: Sequence[int]) -> dict[str, int]:
    return {f"{d}{prefix}": s for d, s in zip("NCHW", dims, strict=True)}


# op_type, parameters, reference forward, input -> mode
CASES: list[tuple[str, dict, Callable[..., torch.Tensor], dict[int, int]]] = [
    ("Mul", {**shape("", (2, 3, 4, 5)), **shape("_b", (1, 3, 1, 5))}, lambda a, b: a * b, {0: 3, 1: 4}),
    ("Div", {**shape("", (2, 3, 4, 5)), **shape("_b", (1, 1, 1, 1))}, lambda a, b: a / b, {0: 3, 1: 4}),
    ("Sub", {**shape("", (1, 3, 1, 5)), **shape("_b", (2, 3, 4, 5))}, lambda a, b: a - b, {0: 3, 1: 4}),
    ("Pow", {**shape("", (2, 3, 4, 5)), **shape("_b", (2, 3, 4, 5))}, torch.pow, {0: 3, 1: 4}),
    (
        "Where",
        {**shape("", (1, 1, 4, 5)), **shape("_b", (1, 1, 1, 1)), **shape("_c", (2, 3, 4, 5))},
        lambda c, x, y: c * x + (~c) * y,
        {1: 4, 2: 5},
    ),
]
IDS = [f"{c[0]}-input{i}" for c in CASES for i in c[3]]


@pytest.mark.parametrize(
    ("op_type", "params", "reference", "index", "mode"),
    [(op, p, ref, i, m) for op, p, ref, modes in CASES for i, m in modes.items()],
    ids=IDS,
)
def test_one_inputs_gradient_equals_autograd_for_that_input(op_type, params, reference, index, mode) -> None:
    torch.manual_seed(0)
    timed = tk.KERNELS[op_type]({**params, "mode": mode}, CPU, F32)
    (got,) = timed()
    leaves = [t.detach().clone().requires_grad_(i == index) for i, t in enumerate(timed.inputs)]
    (expected,) = torch.autograd.grad(reference(*leaves), [leaves[index]], timed.grad_outputs)
    assert got.shape == timed.inputs[index].shape  # a broadcast input's gradient is summed to its shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def aten_calls(run: Callable[[], object]) -> list[str]:
    run()
    with profile() as prof:
        run()
    return [e.name for e in prof.events() if e.name.startswith("aten::") and e.self_cpu_time_total > 0]


def test_dividing_by_a_constant_times_one_division_and_the_divisors_gradient_more() -> None:
    params = {**shape("", (2, 3, 4, 5)), **shape("_b", (1, 1, 1, 1))}
    numerator = aten_calls(tk.KERNELS["Div"]({**params, "mode": 3}, CPU, F32))
    both = aten_calls(tk.KERNELS["Div"]({**params, "mode": 1}, CPU, F32))
    assert numerator.count("aten::div") == 1 and "aten::sum" not in numerator
    assert "aten::sum" in both and both.count("aten::div") >= 2  # -g a / b^2, summed to b's one element


def test_a_gradient_mode_of_an_input_without_one_is_refused_with_the_modes_there_are() -> None:
    where = {**shape("", (1, 1, 4, 5)), **shape("_b", (2, 3, 4, 5)), **shape("_c", (2, 3, 4, 5))}
    with pytest.raises(UnsupportedRow, match=r"mode=3: .*4 \(input 1\), 5 \(input 2\)"):
        tk.KERNELS["Where"]({**where, "mode": 3}, CPU, F32)  # the condition has no gradient
    scalar_exponent = {**shape("", (2, 3, 4, 5)), **shape("_b", (1, 1, 1, 1)), "mode": 4}
    with pytest.raises(UnsupportedRow, match="constant"):
        tk.KERNELS["Pow"](scalar_exponent, CPU, F32)
    with pytest.raises(UnsupportedRow, match="mode=5"):
        tk.KERNELS["Mul"]({**shape("", (2, 3, 4, 5)), **shape("_b", (2, 3, 4, 5)), "mode": 5}, CPU, F32)


def test_one_inputs_gradient_costs_less_than_both() -> None:
    params = {**shape("", (2, 3, 4, 5)), **shape("_b", (1, 3, 1, 5))}
    both = operation_cost("Mul", {**params, "mode": 1})
    a_alone, b_alone = operation_cost("Mul", {**params, "mode": 3}), operation_cost("Mul", {**params, "mode": 4})
    # a alone: read the gradient (120) and b (15), write da (120); b alone: read g and a, write db (15)
    assert a_alone == (120.0, 4.0 * (120 + 15 + 120))
    assert b_alone == (120.0, 4.0 * (120 + 120 + 15))
    assert a_alone[1] < both[1] and b_alone[1] < both[1]
    assert operation_cost("Where", {**params, **shape("_c", (2, 3, 4, 5)), "mode": 3}) == (0.0, 0.0)
