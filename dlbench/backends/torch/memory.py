"""How much memory a row's tensors need, and whether that fits in the free memory."""

from __future__ import annotations

import torch

from dlbench.backends.torch.params import glue, integer, positive, shape4, window
from dlbench.core.costs import UPDATE_COSTS
from dlbench.core.glue import GLUE_OP_TYPES, INDEX_BYTES, elements
from dlbench.core.machine import available_memory_bytes


def _out_size(size: int, kernel: int, pad_total: int, stride: int, dilation: int = 1) -> int:
    return max(1, (size + pad_total - dilation * (kernel - 1) - 1) // max(stride, 1) + 1)


def tensor_bytes(op_type: str, p: dict[str, float], element_size: int) -> int:
    """An upper estimate of the bytes the kernel for ``op_type`` allocates for one row: inputs, outputs,
    gradients and the temporaries made while building them. Invalid parameters raise UnsupportedRow."""
    if op_type in GLUE_OP_TYPES:
        return _glue_bytes(op_type, p, element_size)
    if op_type in ("Gemm", "MatMul"):
        positive(p, "M", "K", "N", "batch")
        m, k, n, batch = integer(p, "M"), integer(p, "K"), integer(p, "N"), integer(p, "batch", 1)
        return batch * (m * k + k * n + m * n) * element_size
    if op_type == "SoftmaxCrossEntropyLoss":
        positive(p, "N", "C")
        return 3 * integer(p, "N") * integer(p, "C") * element_size  # logits, log-probabilities, gradient
    if op_type in ("FrameworkOverhead", "AmpUpdateScale"):  # nothing, or three one-element tensors
        return 0
    if op_type == "AmpUnscale":  # the gradients, unscaled in place
        positive(p, "elements")
        return integer(p, "elements") * element_size
    if op_type in UPDATE_COSTS:  # parameters, gradients and up to four state tensors each (AMSGrad, centered)
        positive(p, "tensors")
        n, c, h, w = shape4(p)
        numel = integer(p, "numel", 0) or n * c * h * w * integer(p, "tensors", 1)
        return 6 * numel * element_size
    if op_type == "NLLLoss":
        positive(p, "N", "C")
        return 3 * integer(p, "N") * integer(p, "C") * element_size  # log-probabilities, gradient
    n, c, h, w = shape4(p)
    x = n * c * h * w
    mode = integer(p, "mode", 0)
    if op_type == "Conv":
        positive(p, "K")
        kernel, strides, pads, dil = window(p)
        k, groups = integer(p, "K"), max(integer(p, "group", 1), 1)
        padded = n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
        weight = k * max(c // groups, 1) * kernel[0] * kernel[1]
        ho = _out_size(h, kernel[0], pads[0] + pads[2], strides[0], dil[0])
        wo = _out_size(w, kernel[1], pads[1] + pads[3], strides[1], dil[1])
        out = n * k * ho * wo
        elements = x + padded + weight + out if mode == 0 else x + padded + weight + 2 * out + max(padded, weight)
        return elements * element_size
    if op_type in ("MaxPool", "AveragePool"):
        kernel, strides, pads, _ = window(p)
        padded = n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
        ho = _out_size(h, kernel[0], pads[0] + pads[2], strides[0])
        wo = _out_size(w, kernel[1], pads[1] + pads[3], strides[1])
        out = n * c * ho * wo
        indices = 2 * out * INDEX_BYTES if op_type == "MaxPool" else 0
        return (x + 2 * padded + 3 * out) * element_size + indices
    if op_type == "Add":
        b_shape = shape4(p, "_b")
        b = b_shape[0] * b_shape[1] * b_shape[2] * b_shape[3]
        out = max(n, b_shape[0]) * max(c, b_shape[1]) * max(h, b_shape[2]) * max(w, b_shape[3])
        return (x + b + out) * element_size
    # elementwise and normalisations: input, output, and in backward a gradient and a saved result
    return (2 if mode == 0 or op_type == "GlobalAveragePool" else 4) * x * element_size


def _glue_bytes(op_type: str, p: dict[str, float], element_size: int) -> int:
    """Inputs and outputs (Cast's output at up to 8 bytes, indices at 8); a backward pass also holds the
    incoming gradients, the saved tensors and the input gradients."""
    tensors = glue(op_type, p)
    out_size = 8 if op_type == "Cast" else element_size
    total = sum(
        elements(s) * (element_size if kind == "float" else INDEX_BYTES)
        for s, kind in zip(tensors.inputs, tensors.kinds, strict=True)
    ) + sum(elements(s) * out_size for s in tensors.outputs)
    return total if integer(p, "mode", 0) == 0 else 3 * total


def free_memory(device: torch.device) -> int:
    """Bytes that can be allocated now on ``device`` without swapping or an out-of-memory kill."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory_bytes()


def _size(n_bytes: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= factor:
            return f"{n_bytes / factor:.1f} {unit}"
    return f"{int(n_bytes)} B"


def memory_problem(needed: int, free: int, fraction: float) -> str:
    """Why a row is skipped, or empty when ``needed`` bytes fit in ``fraction`` of ``free``."""
    if needed <= fraction * free:
        return ""
    return f"needs {_size(needed)}, over {fraction:.0%} of the {_size(free)} free; skipped"
