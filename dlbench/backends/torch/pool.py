"""Max, average and global average pooling: forward (mode 0: what training runs, MaxPool keeping the max
positions for its backward pass), backward (mode 1), and inference forward (mode 2: no positions kept). With
asymmetric pads (ONNX files only) inference pads the input inside the timed call, as the torch engine does;
training pads it once outside. ``ceil_mode`` 1 keeps the last, partial windows (torchvision's pools, as the
engine runs them)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import Kernel, UnsupportedRow, aten, integer, padded, randn, shape4, window


def pool_kernel(kind: str) -> Kernel:
    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
        n, c, h, w = shape4(p)
        kernel, strides, pads, _ = window(p)
        mode, ceil = integer(p, "mode", 0), bool(integer(p, "ceil_mode", 0))
        pad_value = -math.inf if kind == "max" else 0.0
        if mode == 2 and not (pads[0] == pads[2] and pads[1] == pads[3]):
            return _padded_in_the_call(kind, randn((n, c, h, w), device, dtype), pads, kernel, strides, ceil)
        if max(pads) * 2 > min(kernel) or not (pads[0] == pads[2] and pads[1] == pads[3]):
            x, padding = padded(randn((n, c, h, w), device, dtype), pads, pad_value)
        else:
            x, padding = randn((n, c, h, w), device, dtype), [pads[0], pads[1]]
        if x.shape[2] < kernel[0] or x.shape[3] < kernel[1]:
            raise UnsupportedRow(f"kernel {kernel} is larger than the padded input {h}x{w}")
        if mode not in (0, 1, 2):
            raise UnsupportedRow(f"mode={mode}: pooling has 0 forward-training, 1 backward, 2 inference")
        if kind == "max" and mode == 2:  # what an eval-mode network runs: F.max_pool2d without indices
            return lambda: F.max_pool2d(x, kernel, strides, padding, ceil_mode=ceil)
        if kind == "max":
            out, indices = aten.max_pool2d_with_indices(x, kernel, strides, padding, [1, 1], ceil)
            if mode == 0:
                return lambda: aten.max_pool2d_with_indices(x, kernel, strides, padding, [1, 1], ceil)
            grad = torch.randn_like(out)
            return lambda: aten.max_pool2d_with_indices_backward(
                grad, x, kernel, strides, padding, [1, 1], ceil, indices
            )
        if x.shape[2:] != (h, w):  # padded beforehand (asymmetric pads): divide by the input elements covered
            return _avg_pool_prepadded(x, (h, w), pads, kernel, strides, mode, ceil)
        if mode in (0, 2):  # the same kernel in training and inference: nothing is kept for the backward
            # ONNX's AveragePool (count_include_pad=0 by default) and oneDNN exclude the padding
            return lambda: F.avg_pool2d(x, kernel, strides, padding, ceil, count_include_pad=False)
        grad = torch.randn_like(F.avg_pool2d(x, kernel, strides, padding, ceil, count_include_pad=False))
        return lambda: aten.avg_pool2d_backward(grad, x, kernel, strides, padding, ceil, False, None)

    return kernel_fn


def _padded_in_the_call(
    kind: str, x: torch.Tensor, pads: list[int], kernel: list[int], strides: list[int], ceil: bool
) -> Callable[[], object]:
    """Inference pooling with asymmetric pads as the torch engine runs it (``backends/torch/graph.py``: onnx2torch's
    MaxPool, the converters' AveragePool): the input padded in each call (-inf for max, zeros for average), then
    the pool; an average divides each window's sum by the input elements it covers (count_include_pad=0)."""
    torch_pads = (pads[1], pads[3], pads[0], pads[2])
    if x.shape[2] + pads[0] + pads[2] < kernel[0] or x.shape[3] + pads[1] + pads[3] < kernel[1]:
        raise UnsupportedRow(f"kernel {kernel} is larger than the padded input {tuple(x.shape[2:])}")
    if kind == "max":
        return lambda: F.max_pool2d(F.pad(x, torch_pads, value=-math.inf), kernel, strides, ceil_mode=ceil)
    ones = torch.ones((1, 1, *x.shape[2:]), device=x.device, dtype=x.dtype)
    counts = F.avg_pool2d(F.pad(ones, torch_pads), kernel, strides, ceil_mode=ceil, divisor_override=1)
    return lambda: F.avg_pool2d(F.pad(x, torch_pads), kernel, strides, ceil_mode=ceil, divisor_override=1) / counts


def _avg_pool_prepadded(
    x: torch.Tensor,
    size: tuple[int, int],
    pads: list[int],
    kernel: list[int],
    strides: list[int],
    mode: int,
    ceil: bool,
) -> Callable[[], object]:
    """ONNX AveragePool (count_include_pad=0) of an input padded once outside the timed call: each window's sum
    divided by the input elements it covers (a border window covers fewer), forward or backward."""
    ones = torch.ones((1, 1, *size), device=x.device, dtype=x.dtype)
    padded_ones = F.pad(ones, (pads[1], pads[3], pads[0], pads[2]))
    counts = F.avg_pool2d(padded_ones, kernel, strides, ceil_mode=ceil, divisor_override=1)
    if mode in (0, 2):
        return lambda: F.avg_pool2d(x, kernel, strides, ceil_mode=ceil, divisor_override=1) / counts
    grad = torch.randn_like(F.avg_pool2d(x, kernel, strides, ceil_mode=ceil, divisor_override=1))
    return lambda: aten.avg_pool2d_backward(grad / counts, x, kernel, strides, [0, 0], ceil, True, 1)


def global_avg_pool(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x = randn(shape4(p), device, dtype)
    if integer(p, "mode", 0) == 0:
        return lambda: F.adaptive_avg_pool2d(x, 1)
    grad = torch.randn_like(F.adaptive_avg_pool2d(x, 1))
    return lambda: aten._adaptive_avg_pool2d_backward(grad, x)
