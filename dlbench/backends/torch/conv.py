"""Convolution forward, backward-data and backward-weights (the aten op training runs). With ``has_bias`` 1 the
forward adds a per-channel bias (a 1x1 convolution's ``_slow_conv2d_forward`` copies it into the output
first) and backward-weights reduces its gradient too, as a biased layer's backward call does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import Pass, UnsupportedRow, aten, integer, padded, positive, randn, shape4, window


def conv(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    n, c, h, w = shape4(p)
    positive(p, "K")
    k, groups, mode = integer(p, "K"), integer(p, "group", 1), integer(p, "mode", 0)
    kernel, strides, pads, dil = window(p)
    if groups < 1 or c % groups or k % groups:
        raise UnsupportedRow(f"C={c} and K={k} must be divisible by group={groups}")
    eff = [dil[i] * (kernel[i] - 1) + 1 for i in range(2)]
    if h + pads[0] + pads[2] < eff[0] or w + pads[1] + pads[3] < eff[1]:
        raise UnsupportedRow(f"kernel {kernel} (dilated {eff}) is larger than the padded input {h}x{w}")
    x, padding = padded(randn((n, c, h, w), device, dtype), pads)
    weight = randn((k, c // groups, *kernel), device, dtype)
    bias = randn((k,), device, dtype) if integer(p, "has_bias", 0) else None
    if mode == 0:
        return Pass(lambda: F.conv2d(x, weight, bias, strides, padding, dil, groups), (x, weight, *_given(bias)))
    if mode not in (1, 2):
        raise UnsupportedRow(f"mode={mode}: Conv has 0 forward, 1 backward-data, 2 backward-weights")
    grad = torch.randn_like(F.conv2d(x, weight, None, strides, padding, dil, groups))
    mask = [mode == 1, mode == 2, mode == 2 and bias is not None]
    sizes = None if bias is None else [k]
    return Pass(
        lambda: aten.convolution_backward(grad, x, weight, sizes, strides, padding, dil, False, [0, 0], groups, mask),
        (x, weight),
        (grad,),
    )


def _given(bias: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    return () if bias is None else (bias,)
