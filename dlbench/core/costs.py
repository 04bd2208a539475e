"""Each operator's cost from its canonical parameters: FLOPs and the compulsory bytes moved."""

from __future__ import annotations

import math
from collections.abc import Mapping

from dlbench.core.collectives import collective_bytes, is_collective
from dlbench.core.glue import GLUE_OP_TYPES, InvalidParameters, glue_cost
from dlbench.core.values import Number


def conv_output_hw(p: Mapping[str, Number]) -> tuple[int, int]:
    """Output height and width of a 2-D convolution or pooling window from its descriptors."""
    dil0, dil1 = p.get("dilations_0", 1), p.get("dilations_1", 1)
    eff0 = dil0 * (p["kernel_shape_0"] - 1) + 1
    eff1 = dil1 * (p["kernel_shape_1"] - 1) + 1
    out_h = (p["H"] + p["pads_0"] + p["pads_2"] - eff0) // p["strides_0"] + 1
    out_w = (p["W"] + p["pads_1"] + p["pads_3"] - eff1) // p["strides_1"] + 1
    return int(out_h), int(out_w)


def _elements(p: Mapping[str, Number], prefix: str = "", suffix: str = "") -> int:
    return int(math.prod(int(p.get(f"{prefix}{d}{suffix}", 1)) for d in "NCHW"))


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
        if op_type == "SGD":  # buf = m buf + g; p -= lr buf: 3 FLOPs, 3 reads and 2 writes per element
            e = _elements(p)
            return float(3 * e), dtype_bytes * float(5 * e)
        if op_type == "SoftmaxCrossEntropyLoss":  # log_softmax + gather; backward: zero, scatter, softmax grad
            e = int(p["N"]) * int(p["C"])
            return float(5 * e), dtype_bytes * float((2 if mode == 0 else 4) * e)
        if op_type in ("Softmax", "LayerNormalization"):
            e = _elements(p)
            return float(5 * e if op_type == "Softmax" else 8 * e), dtype_bytes * float(2 * e)
    except (KeyError, InvalidParameters):
        return 0.0, 0.0
    return 0.0, 0.0
