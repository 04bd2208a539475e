"""Reading a protocol row's parameters into tensors: typed accessors that reject impossible values row by row, and
the shared tensor helpers of the kernels."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dlbench.core.glue import INPUT_GRADIENT_MODE, GlueTensors, InvalidParameters, glue_tensors

aten = torch.ops.aten


Kernel = Callable[[dict[str, float], torch.device, torch.dtype], Callable[[], object]]


class UnsupportedRow(ValueError):
    """This row's parameters cannot run (the message says why); other rows go on."""


def integer(p: dict[str, float], key: str, default: int | None = None) -> int:
    if key not in p:
        if default is None:
            raise UnsupportedRow(f"missing parameter {key}")
        return default
    value = p[key]
    if not float(value).is_integer():
        raise UnsupportedRow(f"{key}={value} is not an integer")
    return int(value)


def positive(p: dict[str, float], *keys: str) -> None:
    for key in keys:
        if integer(p, key, 1) < 1:
            raise UnsupportedRow(f"{key}={p.get(key)} must be >= 1")


def shape4(p: dict[str, float], suffix: str = "") -> tuple[int, int, int, int]:
    positive(p, *(f"{d}{suffix}" for d in "NCHW"))
    return tuple(integer(p, f"{d}{suffix}", 1) for d in "NCHW")  # type: ignore[return-value]


#: the memory format a row's 4-D tensors are made in (:func:`laid_out_as`); tensors of other ranks stay dense
_LAYOUT: ContextVar[torch.memory_format] = ContextVar("dlbench_row_layout", default=torch.contiguous_format)
MEMORY_FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


@contextmanager
def laid_out_as(memory_format: str) -> Iterator[None]:
    """Build a row's tensors in ``memory_format`` (a ``core/dtypes.py`` name): what :func:`randn`,
    :func:`in_layout` and :func:`padded` make within; ``torch.*_like`` keeps the format of what it copies."""
    token = _LAYOUT.set(MEMORY_FORMATS[memory_format])
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def in_layout(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in the row's memory format where it is 4-D (a copy only where its strides differ)."""
    return tensor.contiguous(memory_format=_LAYOUT.get()) if tensor.dim() == 4 else tensor


def row_layout() -> torch.memory_format:
    """The memory format of the row being built (:func:`laid_out_as`); read it while building, not when timed."""
    return _LAYOUT.get()


def other_layout(tensor: torch.Tensor) -> torch.Tensor:
    """A 4-D ``tensor`` in the memory format the row's is not: the source of a layout conversion into the row's."""
    other = torch.contiguous_format if _LAYOUT.get() == torch.channels_last else torch.channels_last
    return tensor.contiguous(memory_format=other)


def randn(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return in_layout(torch.randn(shape, device=device, dtype=dtype)).requires_grad_(grad)


def window(p: dict[str, float]) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = [integer(p, "kernel_shape_0"), integer(p, "kernel_shape_1")]
    strides = [integer(p, "strides_0", 1), integer(p, "strides_1", 1)]
    pads = [integer(p, f"pads_{i}", 0) for i in range(4)]
    dil = [integer(p, "dilations_0", 1), integer(p, "dilations_1", 1)]
    if min(kernel) < 1 or min(strides) < 1 or min(dil) < 1 or min(pads) < 0:
        raise UnsupportedRow("kernel, strides and dilations must be >= 1, pads >= 0")
    return kernel, strides, pads, dil


def padded(x: torch.Tensor, pads: list[int], value: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """Symmetric pads go to the operator; asymmetric ones are applied once, outside the timed region."""
    if pads[0] == pads[2] and pads[1] == pads[3]:
        return x, [pads[0], pads[1]]
    return in_layout(F.pad(x, (pads[1], pads[3], pads[0], pads[2]), value=value).detach()), [0, 0]


def axis_of(p: dict[str, float]) -> int:
    axis = integer(p, "axis", -1)
    if not -4 <= axis < 4:
        raise UnsupportedRow(f"axis={axis} is outside a rank-4 tensor")
    return axis % 4


def glue(op_type: str, p: dict[str, float]) -> GlueTensors:
    """The tensors of a glue operator's row (:mod:`dlbench.core.glue`); invalid parameters fail the row."""
    try:
        return glue_tensors(op_type, p)
    except InvalidParameters as err:
        raise UnsupportedRow(str(err)) from err


@dataclass(frozen=True)
class Pass:
    """One row's timed callable, with the tensors it reads (and the incoming gradients of a backward pass),
    so a check can recompute the result with torch's own operators."""

    run: Callable[[], object]
    inputs: tuple[torch.Tensor, ...]
    grad_outputs: tuple[torch.Tensor, ...] = ()

    def __call__(self) -> object:
        return self.run()


def materialized(result: object) -> object:
    """``result`` with every view copied into a tensor of its own: an ONNX operator writes its outputs, while
    PyTorch's view operators (transpose, slice, expand, split, a concatenation's gradient) defer the copy
    to whichever operator reads them next."""
    if isinstance(result, torch.Tensor):
        return result.contiguous()
    return tuple(t.contiguous() for t in result)  # type: ignore[attr-defined]


def autograd_pass(
    forward: Callable[..., object], inputs: list[torch.Tensor], differentiable: list[int], copy: bool = False
) -> Pass:
    """The backward pass as training runs it where no single aten backward operator exists: the autograd
    graph of ``forward`` is built once, and each call computes the gradients of the ``differentiable``
    inputs from fixed random incoming gradients (the engine's per-node overhead is part of training's cost
    too). ``copy`` materialises gradients that autograd returns as views."""
    leaves = [t.detach().requires_grad_(i in differentiable) for i, t in enumerate(inputs)]
    with torch.enable_grad():
        result = forward(*leaves)
    outputs = (result,) if isinstance(result, torch.Tensor) else tuple(result)  # type: ignore[arg-type]
    grads = tuple(torch.randn_like(o) for o in outputs)
    wrt = [leaves[i] for i in differentiable]
    if copy:
        return Pass(
            lambda: materialized(torch.autograd.grad(outputs, wrt, grads, retain_graph=True)), tuple(leaves), grads
        )
    return Pass(lambda: torch.autograd.grad(outputs, wrt, grads, retain_graph=True), tuple(leaves), grads)


def mode_of(p: dict[str, float]) -> int:
    mode = integer(p, "mode", 0)
    if mode not in (0, 1):
        raise UnsupportedRow(f"mode={mode}: this operator has 0 forward and 1 backward")
    return mode


def gradient_inputs(p: dict[str, float], differentiable: list[int]) -> list[int]:
    """Which inputs a row's pass differentiates: none for the forward (mode 0), every ``differentiable`` one
    (mode 1), or one of them (mode 3 + its index)."""
    mode = integer(p, "mode", 0)
    if mode == 0:
        return []
    if mode == 1:
        return list(differentiable)
    if mode - INPUT_GRADIENT_MODE in differentiable:
        return [mode - INPUT_GRADIENT_MODE]
    allowed = ", ".join(f"{INPUT_GRADIENT_MODE + i} (input {i})" for i in differentiable)
    raise UnsupportedRow(f"mode={mode}: this operator has 0 forward, 1 backward of every input, {allowed}")
