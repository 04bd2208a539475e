"""Pointwise functions (Sqrt, Erf, Gelu, Tanh, Sigmoid, Exp, Log, Neg, Clip) and Cast, forward and backward.
Tanh, Sigmoid, Gelu and Clip time their aten backward operators; the others the gradient formula autograd runs.
Clip's is ``hardtanh_backward``, the one kernel ``nn.ReLU6`` and ``nn.Hardtanh`` (the networks' clips) run;
``torch.clamp`` with autograd runs a where of two comparisons instead, which this under-counts."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import (
    Kernel,
    Pass,
    UnsupportedRow,
    aten,
    autograd_pass,
    glue,
    in_layout,
    integer,
    mode_of,
    other_layout,
    row_layout,
)
from dlbench.core.dtypes import ELEMENT_TYPE_NAMES

#: The forward of each pointwise function, and whether its input must be positive (Sqrt, Log).
FUNCTIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "Sqrt": (torch.sqrt, True),
    "Erf": (torch.erf, False),
    "Tanh": (torch.tanh, False),
    "Sigmoid": (torch.sigmoid, False),
    "Exp": (torch.exp, False),
    "Log": (torch.log, True),
    "Neg": (torch.neg, False),
    "Clip": (lambda x: torch.clamp(x, -1.0, 1.0), False),  # the bounds do not change the time
}
#: aten backward operators of the output: grad_input = op(grad, y)
OUTPUT_BACKWARDS = {"Tanh": aten.tanh_backward, "Sigmoid": aten.sigmoid_backward}
#: aten backward operators of the input: grad_input = op(grad, x)
INPUT_BACKWARDS = {"Clip": lambda grad, x: aten.hardtanh_backward(grad, x, -1.0, 1.0)}


def input_tensor(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, positive: bool) -> torch.Tensor:
    if positive:  # away from 0, where Sqrt's and Log's gradients blow up
        return in_layout(torch.rand(shape, device=device, dtype=dtype) + 0.5)
    return in_layout(torch.randn(shape, device=device, dtype=dtype))


def pointwise_kernel(op_type: str) -> Kernel:
    function, positive = FUNCTIONS[op_type]

    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        (shape,) = glue(op_type, p).inputs
        x, mode = input_tensor(shape, device, dtype, positive), mode_of(p)
        if mode == 0:
            return Pass(lambda: function(x), (x,))
        if op_type in OUTPUT_BACKWARDS:
            backward, y, grad = OUTPUT_BACKWARDS[op_type], function(x), torch.randn_like(x)
            return Pass(lambda: backward(grad, y), (x,), (grad,))
        if op_type in INPUT_BACKWARDS:
            backward, grad = INPUT_BACKWARDS[op_type], torch.randn_like(x)
            return Pass(lambda: backward(grad, x), (x,), (grad,))
        return autograd_pass(function, [x], [0])

    return kernel_fn


def gelu(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    (shape,) = glue("Gelu", p).inputs
    approximate = {0: "none", 1: "tanh"}.get(integer(p, "approximate", 0))
    if approximate is None:
        raise UnsupportedRow(f"approximate={p.get('approximate')}: 0 (none, erf) or 1 (tanh)")
    x, mode = input_tensor(shape, device, dtype, False), mode_of(p)
    if mode == 0:
        return Pass(lambda: F.gelu(x, approximate=approximate), (x,))
    grad = torch.randn_like(x)
    return Pass(lambda: aten.gelu_backward(grad, x, approximate=approximate), (x,), (grad,))


def torch_dtype(onnx_type: int) -> torch.dtype:
    name = ELEMENT_TYPE_NAMES[onnx_type]
    return getattr(torch, name)


def cast(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """From the run's dtype to ``to``; the backward casts the gradient back (float targets only). A Cast to the
    row's own dtype is a layout conversion: a 4-D tensor copied from the other memory format into the row's
    (``aten::copy_`` between contiguous and channels_last, as a step makes a gradient match its weight)."""
    (shape,) = glue("Cast", p).inputs
    target, mode = torch_dtype(integer(p, "to", 1)), mode_of(p)
    if target == dtype:
        if len(shape) != 4:
            raise UnsupportedRow(f"a Cast within {dtype} converts a 4-D tensor's layout, not one of rank {len(shape)}")
        source, into = other_layout(torch.randn(shape, device=device, dtype=dtype)), row_layout()
        if mode == 0:
            return Pass(lambda: source.contiguous(memory_format=into), (source,))
        return autograd_pass(lambda t: t.contiguous(memory_format=into), [source], [0])
    x = torch.randn(shape, device=device, dtype=dtype)
    if mode == 0:
        return Pass(lambda: x.to(target), (x,))
    if not target.is_floating_point:
        raise UnsupportedRow(f"Cast to {target} has no gradient")
    return autograd_pass(lambda t: t.to(target), [x], [0])
