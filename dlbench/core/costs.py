"""Each operator's cost from its canonical parameters: FLOPs and the compulsory bytes moved."""

from __future__ import annotations

import math
from collections.abc import Mapping

from dlbench.core.collectives import collective_bytes, is_collective
from dlbench.core.glue import GLUE_OP_TYPES, InvalidParameters, glue_cost
from dlbench.core.values import Number


def window_outputs(
    size: int, kernel: int, pad_begin: int, pad_end: int, stride: int, dilation: int = 1, ceil_mode: bool = False
) -> int:
    """Positions of a sliding window along one axis. In ceil mode a last, partial window is kept where it
    starts inside the input or its begin padding (torch's rule; ONNX's pooling and onnxruntime follow it)."""
    span = size + pad_begin + pad_end - (dilation * (kernel - 1) + 1)
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad_begin else out


def conv_output_hw(p: Mapping[str, Number]) -> tuple[int, int]:
    """Output height and width of a 2-D convolution or pooling window from its descriptors (``ceil_mode``:
    pooling's, 0 where absent)."""

    def along(i: int, size: str) -> int:
        return window_outputs(
            int(p[size]), int(p[f"kernel_shape_{i}"]), int(p[f"pads_{i}"]), int(p[f"pads_{i + 2}"]),
            int(p[f"strides_{i}"]), int(p.get(f"dilations_{i}", 1)), bool(p.get("ceil_mode", 0)),
        )  # fmt: skip

    return along(0, "H"), along(1, "W")


def _elements(p: Mapping[str, Number], prefix: str = "", suffix: str = "") -> int:
    return int(math.prod(int(p.get(f"{prefix}{d}{suffix}", 1)) for d in "NCHW"))


#: Per parameter element: FLOPs and memory accesses of the plain update (options add to them in update_cost).
UPDATE_COSTS = {"SGD": (2, 3), "Adam": (12, 7), "AdamW": (13, 7), "RMSprop": (6, 5), "ZeroGrad": (0, 1),
                "ClipGradNorm": (3, 3)}  # fmt: skip


def update_cost(op_type: str, p: Mapping[str, Number]) -> tuple[int, int]:
    """FLOPs and accesses per element of an optimizer update: SGD's momentum buffer (read and written, +1 FLOP
    and +1 with nesterov), weight decay (+1 FLOP), AMSGrad's maximum (+1 FLOP, +2 accesses), RMSprop's
    centered mean and momentum buffer (+2 FLOPs, +2 accesses each)."""
    flops, accesses = UPDATE_COSTS[op_type]
    if op_type in ("SGD", "RMSprop") and p.get("momentum", 0):
        flops, accesses = flops + 2 + int(bool(p.get("nesterov", 0))), accesses + 2
    if op_type == "RMSprop" and p.get("centered", 0):
        flops, accesses = flops + 2, accesses + 2
    if op_type in ("Adam", "AdamW") and p.get("amsgrad", 0):
        flops, accesses = flops + 1, accesses + 2
    if p.get("weight_decay", 0):
        flops += 1
    return flops, accesses


def operation_cost(op_type: str, p: Mapping[str, Number], dtype_bytes: int = 4) -> tuple[float, float]:
    """FLOPs and minimum bytes moved of one operation, from its named parameters.

    Multiply-adds count as 2 FLOPs. Bytes are the compulsory traffic (each input read, output written
    once). Unknown operators, and parameters that describe no valid operation, cost (0, 0): their GFLOP/s
    is simply not reported.
    """
    mode = int(p.get("mode", 0))
    try:
        if is_collective(op_type):  # no FLOPs counted: a reduction's adds are not what limits it
            return 0.0, collective_bytes(p)
        if op_type in GLUE_OP_TYPES:
            return glue_cost(op_type, p, dtype_bytes)
        if op_type == "Conv":
            out_h, out_w = conv_output_hw(p)
            n, c, k, g = int(p["N"]), int(p["C"]), int(p["K"]), int(p.get("group", 1))
            kh, kw = int(p["kernel_shape_0"]), int(p["kernel_shape_1"])
            flops = 2.0 * n * k * out_h * out_w * (c // g) * kh * kw
            x, w, y = n * c * p["H"] * p["W"], k * (c // g) * kh * kw, n * k * out_h * out_w
            return flops, dtype_bytes * float(x + w + y)
        if op_type in ("Gemm", "MatMul"):
            m, k, n, b = int(p["M"]), int(p["K"]), int(p["N"]), int(p.get("batch", 1))
            return 2.0 * b * m * n * k, dtype_bytes * float(b * (m * k + k * n + m * n))
        if op_type == "BatchNormalization":
            e = _elements(p)
            per = 5 if mode == 2 else (8 if mode == 0 else 10)
            return float(per * e), dtype_bytes * float((2 if mode != 1 else 3) * e)
        if op_type in ("Relu", "Add"):
            e = _elements(p)
            if op_type == "Add":
                eb = _elements(p, suffix="_b")
                return float(max(e, eb)), dtype_bytes * float(e + eb + max(e, eb))
            return float(e), dtype_bytes * float((2 if mode == 0 else 3) * e)
        if op_type == "GlobalAveragePool":
            e = _elements(p)
            return float(e), dtype_bytes * float(e + int(p["N"]) * int(p["C"]))
        if op_type in ("MaxPool", "AveragePool"):
            out_h, out_w = conv_output_hw(p)
            outs = int(p["N"]) * int(p["C"]) * out_h * out_w
            return float(outs * p["kernel_shape_0"] * p["kernel_shape_1"]), dtype_bytes * float(_elements(p) + outs)
        if op_type in UPDATE_COSTS:  # the optimizer's update over all its tensors: per element FLOPs, accesses
            flops, accesses = update_cost(op_type, p)
            e = int(p.get("numel") or _elements(p) * int(p.get("tensors", 1)))
            return float(flops * e), dtype_bytes * float(accesses * e)
        if op_type in ("MSELoss", "BCEWithLogitsLoss"):  # forward: read input and target; backward: + a gradient
            e = _elements(p)
            return float((3 if op_type == "MSELoss" else 6) * e), dtype_bytes * float((2 if mode == 0 else 3) * e)
        if op_type == "NLLLoss":  # forward gathers N values; backward writes an N x C gradient
            n, c = int(p["N"]), int(p["C"])
            return float(n if mode == 0 else n * c), dtype_bytes * float(n if mode == 0 else n * c)
        if op_type == "SoftmaxCrossEntropyLoss":  # log_softmax + gather; backward: zero, scatter, softmax grad
            e = int(p["N"]) * int(p["C"])
            return float(5 * e), dtype_bytes * float((2 if mode == 0 else 4) * e)
        if op_type == "AmpUnscale":  # each element read, checked, multiplied and written back
            e = int(p["elements"])
            return float(2 * e), dtype_bytes * float(2 * e)
        if op_type == "AmpUpdateScale":  # per scale: it, the growth tracker and found_inf read, two written
            return 2.0 * int(p.get("N", 1)), 20.0 * int(p.get("N", 1))
        if op_type in ("Softmax", "LayerNormalization"):
            e = _elements(p)
            return float(5 * e if op_type == "Softmax" else 8 * e), dtype_bytes * float(2 * e)
    except (KeyError, InvalidParameters):
        return 0.0, 0.0
    return 0.0, 0.0
