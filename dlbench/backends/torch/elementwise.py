"""Relu, Add with broadcasting and Softmax (the optimizer updates are in :mod:`dlbench.backends.torch.optim`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlbench.backends.torch.params import UnsupportedRow, aten, axis_of, integer, randn, shape4


def relu(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x = randn(shape4(p), device, dtype)
    mode = integer(p, "mode", 0)
    if mode == 0:
        return lambda: torch.relu(x)
    y, grad = torch.relu(x), torch.randn_like(x)
    return lambda: aten.threshold_backward(grad, y, 0)


def add(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    a_shape, b_shape = shape4(p), shape4(p, "_b")
    try:
        torch.broadcast_shapes(a_shape, b_shape)
    except RuntimeError as err:
        raise UnsupportedRow(f"shapes {a_shape} and {b_shape} do not broadcast") from err
    a, b = randn(a_shape, device, dtype), randn(b_shape, device, dtype)
    return lambda: torch.add(a, b)


def softmax(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x, axis = randn(shape4(p), device, dtype), axis_of(p)
    if integer(p, "mode", 0) == 0:
        return lambda: torch.softmax(x, axis)
    y, grad = torch.softmax(x, axis), torch.randn_like(x)
    return lambda: aten._softmax_backward_data(grad, y, axis, dtype)
