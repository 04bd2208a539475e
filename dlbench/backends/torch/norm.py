"""BatchNormalization (training, inference, backward) and LayerNormalization (forward, backward)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import UnsupportedRow, aten, axis_of, integer, randn, shape4


def batchnorm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    n, c, h, w = shape4(p)
    eps, momentum, mode = float(p.get("epsilon", 1e-5)), float(p.get("momentum", 0.9)), integer(p, "mode", 0)
    x = randn((n, c, h, w), device, dtype)
    weight, bias = torch.ones(c, device=device, dtype=dtype), torch.zeros(c, device=device, dtype=dtype)
    mean, var = torch.zeros(c, device=device, dtype=dtype), torch.ones(c, device=device, dtype=dtype)
    # ONNX momentum weighs the running value; torch's weighs the new batch statistic.
    torch_momentum = 1.0 - momentum if momentum > 0.5 else momentum
    if mode in (0, 2):
        training = mode == 0
        return lambda: F.batch_norm(x, mean, var, weight, bias, training, torch_momentum, eps)
    if mode != 1:
        raise UnsupportedRow(f"mode={mode}: BatchNormalization has 0 forward-training, 1 backward, 2 inference")
    _, save_mean, save_invstd = aten.native_batch_norm(x, weight, bias, mean, var, True, torch_momentum, eps)
    grad = torch.randn_like(x)
    return lambda: aten.native_batch_norm_backward(
        grad, x, weight, mean, var, save_mean, save_invstd, True, eps, [True, True, True]
    )


def layernorm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x, axis = randn(shape4(p), device, dtype), axis_of(p)
    eps = float(p.get("epsilon", 1e-5))
    shape = list(x.shape[axis:])
    weight, bias = torch.ones(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)
    if integer(p, "mode", 0) == 0:
        return lambda: F.layer_norm(x, shape, weight, bias, eps)
    _, mean, rstd = aten.native_layer_norm(x, shape, weight, bias, eps)
    grad = torch.randn_like(x)
    return lambda: aten.native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias, [True, True, True])
