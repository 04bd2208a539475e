"""Broadcasting arithmetic: Mul, Div, Sub, Pow, the n-ary Sum, Max and Min, and Where, forward and backward
(the gradient formula autograd runs, including the sums a broadcast operand's gradient needs), for every
input or for one (training differentiates only the inputs that need a gradient: ``x / constant``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from dlbench.backends.torch.params import (
    Kernel,
    Pass,
    UnsupportedRow,
    autograd_pass,
    glue,
    gradient_inputs,
    in_layout,
    integer,
    mode_of,
)
from dlbench.core.glue import BUCKET_VIEW_MODE

BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Mul": torch.mul,
    "Div": torch.div,
    "Sub": torch.sub,
}
VARIADIC: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Sum": torch.add,
    "Max": torch.maximum,
    "Min": torch.minimum,
}


def binary_kernel(op_type: str) -> Kernel:
    function = BINARY[op_type]

    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        a_shape, b_shape = glue(op_type, p).inputs
        a = in_layout(torch.randn(a_shape, device=device, dtype=dtype))
        # a divisor away from 0 (and a gradient -a/b^2 that stays finite)
        b = in_layout(torch.rand(b_shape, device=device, dtype=dtype))
        b = b + 0.5 if op_type == "Div" else torch.randn_like(b)
        if op_type == "Mul" and integer(p, "mode", 0) == BUCKET_VIEW_MODE:
            return _into_bucket_view(a, b)
        wrt = gradient_inputs(p, [0, 1])
        if not wrt:
            return Pass(lambda: function(a, b), (a, b))
        return autograd_pass(function, [a, b], wrt)

    return kernel_fn


def power(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """Pow of a positive base. A one-element exponent is a constant in real networks (x^2 of a variance,
    x^3 of tanh-GELU) and runs as PyTorch's scalar pow, timed with 2; its gradient is the base's only."""
    a_shape, b_shape = glue("Pow", p).inputs
    a = torch.rand(a_shape, device=device, dtype=dtype) + 0.5
    scalar = all(d == 1 for d in b_shape)
    b = (
        torch.full(b_shape, 2.0, device=device, dtype=dtype)
        if scalar
        else torch.rand(b_shape, device=device, dtype=dtype)
    )

    def function(base: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
        return torch.pow(base, 2.0) if scalar else torch.pow(base, exponent)

    # mode 1: the base's gradient (an exponent is a constant in real networks); mode 4: the exponent's alone
    wrt = gradient_inputs(p, [0, 1])
    if not wrt:
        return Pass(lambda: function(a, b), (a, b))
    if wrt == [1] and scalar:
        raise UnsupportedRow("a one-element exponent is a constant (timed as 2): it has no gradient")
    return autograd_pass(function, [a, b], [0] if len(wrt) == 2 else wrt)


def variadic_kernel(op_type: str) -> Kernel:
    """Sum, Max and Min of n inputs, as a chain of n-1 binary operations (what PyTorch code runs)."""
    function = VARIADIC[op_type]

    def combine(*tensors: torch.Tensor) -> torch.Tensor:
        return functools.reduce(function, tensors) if len(tensors) > 1 else tensors[0].clone()

    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        shapes = glue(op_type, p).inputs
        inputs = [torch.randn(s, device=device, dtype=dtype) for s in shapes]
        if mode_of(p) == 0:
            return Pass(lambda: combine(*inputs), tuple(inputs))
        return autograd_pass(combine, inputs, list(range(len(inputs))))

    return kernel_fn


def _into_bucket_view(a: torch.Tensor, b: torch.Tensor) -> Pass:
    """DDP's copy of a gradient into its bucket: ``mul(grad, 1 / world_size, out=view)``, the view a slice of
    a flat bucket that outlives the step (and its copy back reads and writes as many bytes), not a fresh
    output allocated per call."""
    shape = torch.broadcast_shapes(a.shape, b.shape)
    size = math.prod(shape)
    bucket = torch.zeros(2 * size, device=a.device, dtype=a.dtype)  # the gradient's slice sits inside it
    view = bucket[size // 2 : size // 2 + size].view(shape)
    return Pass(lambda: torch.mul(a, b, out=view), (a, b))


def where(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    c_shape, x_shape, y_shape = glue("Where", p).inputs
    condition = torch.rand(c_shape, device=device) < 0.5
    x, y = torch.randn(x_shape, device=device, dtype=dtype), torch.randn(y_shape, device=device, dtype=dtype)
    wrt = gradient_inputs(p, [1, 2])
    filled = _masked_fill(condition, x, y, wrt)
    if filled is not None:
        return filled
    if not wrt:
        return Pass(lambda: torch.where(condition, x, y), (condition, x, y))
    return autograd_pass(torch.where, [condition, x, y], wrt)


def _masked_fill(condition: torch.Tensor, x: torch.Tensor, y: torch.Tensor, wrt: list[int]) -> Pass | None:
    """A Where one of whose values is a single element and the other the whole output is how ONNX writes
    ``masked_fill`` (``Where(mask, value, t)``): PyTorch fills the tensor's copy in place (``masked_fill_``),
    forward and in MaskedFillBackward0 (the gradient of the tensor, zeroed where the mask is set), so it is
    timed so, not as an out-of-place ``torch.where`` reading three operands. The scalar's own gradient (a sum)
    stays autograd's. None: not that form."""
    shape = torch.broadcast_shapes(condition.shape, x.shape, y.shape)
    forms = [(s, f, i) for s, f, i in ((x, y, 2), (y, x, 1)) if s.numel() == 1 and f.shape == shape]
    if not forms or wrt not in ([], [forms[0][2]]):
        return None
    scalar, full, index = forms[0]
    mask = condition if index == 2 else ~condition
    if not wrt:
        value = float(scalar.reshape(()))
        return Pass(lambda: full.masked_fill_(mask, value), (condition, x, y))
    grad = torch.randn_like(full)  # the incoming gradient, zeroed where the mask set the value
    return Pass(lambda: (grad.masked_fill_(mask, 0.0),), (condition, x, y), (grad,))
