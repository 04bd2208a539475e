"""Reading a protocol row's parameters into tensors: typed accessors that reject impossible values row by row, and
the shared tensor helpers of the kernels."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

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


def randn(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device=device, dtype=dtype, requires_grad=grad)


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
    return F.pad(x, (pads[1], pads[3], pads[0], pads[2]), value=value).detach(), [0, 0]


def axis_of(p: dict[str, float]) -> int:
    axis = integer(p, "axis", -1)
    if not -4 <= axis < 4:
        raise UnsupportedRow(f"axis={axis} is outside a rank-4 tensor")
    return axis % 4
