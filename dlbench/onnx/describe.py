"""Operations described by the original tool's descriptors: canonical parameters for the operators dlbench knows,
``?`` plus flattened attributes for the others."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.shapes import Shape, axis4, rank4, rank4_spatial
from dlbench.core.values import Number

Params = tuple[tuple[str, Number], ...]


class CannotDescribe(Exception):
    """A node whose shapes or attributes do not allow describing it (the message says which)."""


class NoCanonicalForm(Exception):
    """A known operator in a form the canonical descriptors do not cover (e.g. a 3-D convolution): it is
    described like an unknown operator instead."""


def _spatial(shape: Shape) -> Shape:
    """N, C, H, W of an operator with a batch and a channel axis (see :func:`rank4_spatial`)."""
    if len(shape) < 2:
        raise CannotDescribe(f"expected an (N, C, ...) input, got shape {list(shape)}")
    return rank4_spatial(shape)


def _window(
    attrs: Mapping[str, Any], spatial_in: Sequence[int], kernel: Sequence[int], where: str
) -> tuple[list[int], list[int], list[int]]:
    """Pads (ONNX order begin..., end...), strides and dilations for a 1-D or 2-D window, ``auto_pad``
    resolved to explicit pads."""
    rank = len(kernel)
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    pads = list(attrs.get("pads") or [0] * (2 * rank))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * rank)
        for i in range(rank):
            out = -(-spatial_in[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial_in[i])
            small, large = total // 2, total - total // 2
            pads[i], pads[i + rank] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * rank)
    elif auto_pad != "NOTSET":
        raise CannotDescribe(f"{where}: auto_pad={auto_pad!r} is not an ONNX value")
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise CannotDescribe(f"{where}: strides/dilations/pads do not match a {rank}-D window")
    return pads, strides, dilations


def _window_2d(values: Sequence[int], rank: int, fill: int) -> list[int]:
    """A 1-D window's values as 2-D ones with H as the unit dimension."""
    return [fill, *values] if rank == 1 else list(values)


def _conv(shapes: Sequence[Shape | None], attrs: Mapping[str, Any], mode: int) -> Params:
    x, w = shapes[0], shapes[1]
    if x is None or w is None:
        raise CannotDescribe("input or weight shape unknown")
    if len(x) not in (3, 4):
        raise NoCanonicalForm(f"only 1-D and 2-D convolutions have canonical descriptors, input {list(x)}")
    kernel = list(attrs.get("kernel_shape") or w[2:])
    rank = len(kernel)
    pads, strides, dilations = _window(attrs, x[2:], kernel, "Conv")
    n, c, h, wd = _spatial(x)
    if rank == 1:
        pads = [0, pads[0], 0, pads[1]]
    values = [
        n,
        c,
        h,
        wd,
        int(w[0]),
        *_window_2d(kernel, rank, 1),
        *pads,
        *_window_2d(strides, rank, 1),
        *_window_2d(dilations, rank, 1),
        int(attrs.get("group", 1)),
        mode,
    ]
    return tuple(zip(DESCRIPTORS["Conv"], (int(v) for v in values), strict=True))


def _pool(shapes: Sequence[Shape | None], attrs: Mapping[str, Any], op_type: str) -> Params:
    x = shapes[0]
    if x is None:
        raise CannotDescribe("input shape unknown")
    if len(x) not in (3, 4):
        raise NoCanonicalForm(f"only 1-D and 2-D pooling has canonical descriptors, input {list(x)}")
    kernel = list(attrs.get("kernel_shape") or [])
    if len(kernel) != len(x) - 2:
        raise CannotDescribe(f"{op_type}: kernel_shape {kernel} does not fit input {list(x)}")
    rank = len(kernel)
    pads, strides, _ = _window(attrs, x[2:], kernel, op_type)
    if rank == 1:
        pads = [0, pads[0], 0, pads[1]]
    values = [*_spatial(x), *_window_2d(kernel, rank, 1), *pads, *_window_2d(strides, rank, 1), 0]
    return tuple(zip(DESCRIPTORS[op_type], (int(v) for v in values), strict=True))


def _gemm(shapes: Sequence[Shape | None], attrs: Mapping[str, Any]) -> Params:
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        raise CannotDescribe("Gemm needs two 2-D inputs of known shape")
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    m, k = (a[1], a[0]) if trans_a else a
    n = b[0] if trans_b else b[1]
    return tuple(zip(DESCRIPTORS["Gemm"], (int(m), int(k), int(n), trans_a, trans_b, 1), strict=True))


def _matmul(shapes: Sequence[Shape | None]) -> Params:
    """MatMul as one (strided-batched) GEMM. When only A has leading dimensions (a weight B), they fold into
    M, as frameworks run it; when both have them, ``batch`` is the product of the broadcast leading dims."""
    a, b = shapes[0], shapes[1]
    if a is None or b is None or not a or not b:
        raise CannotDescribe("MatMul needs two inputs of known, non-scalar shape")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    lead_a, lead_b = a2[:-2], b2[:-2]
    if not lead_b:
        m, batch = m * math.prod(lead_a), 1
    else:
        width = max(len(lead_a), len(lead_b))
        pa = (1,) * (width - len(lead_a)) + tuple(lead_a)
        pb = (1,) * (width - len(lead_b)) + tuple(lead_b)
        batch = math.prod(max(x, y) for x, y in zip(pa, pb, strict=True))
    return tuple(zip(DESCRIPTORS["MatMul"], (int(m), int(k), int(n), 0, 0, int(batch)), strict=True))


def describe_known(
    op_type: str, shapes: Sequence[Shape | None], attrs: Mapping[str, Any], opset: int, training: bool
) -> Params | None:
    """Canonical parameters of a known operator, or None when the op_type has none."""
    first = shapes[0] if shapes else None
    if op_type == "Conv":
        return _conv(shapes, attrs, mode=0)
    if op_type in ("MaxPool", "AveragePool"):
        return _pool(shapes, attrs, op_type)
    if op_type == "Gemm":
        return _gemm(shapes, attrs)
    if op_type == "MatMul":
        return _matmul(shapes)
    if op_type not in DESCRIPTORS:
        return None
    if first is None:
        raise CannotDescribe("input shape unknown")
    if op_type == "BatchNormalization":
        train = training or bool(attrs.get("training_mode", 0))
        values = (
            *_spatial(first),
            float(attrs.get("epsilon", 1e-5)),
            float(attrs.get("momentum", 0.9)),
            0 if train else 2,
        )
    elif op_type in ("Relu",):
        values = (*rank4(op_type, first), 0)
    elif op_type == "GlobalAveragePool":
        values = (*_spatial(first), 0)
    elif op_type == "Add":
        second = shapes[1] if len(shapes) > 1 else None
        if second is None:
            raise CannotDescribe("second input shape unknown")
        values = (*rank4(op_type, first), *rank4(op_type, second))
    elif op_type == "Softmax":
        axis = int(attrs.get("axis", -1 if opset >= 13 else 1))
        values = (*rank4(op_type, first), axis4(axis, len(first)), 0)
    elif op_type == "LayerNormalization":
        axis = int(attrs.get("axis", -1))
        values = (*rank4(op_type, first), axis4(axis, len(first)), float(attrs.get("epsilon", 1e-5)), 0)
    else:  # an op_type added to ops.DESCRIPTORS that this module does not know yet
        return None
    return tuple(zip(DESCRIPTORS[op_type], values, strict=True))


def describe_unknown(shapes: Sequence[Shape | None], names: Sequence[str], flat_attrs: Params) -> Params:
    params: list[tuple[str, Number]] = []
    for name, shape in zip(names, shapes, strict=True):
        if not name:
            continue
        if shape is None:
            raise CannotDescribe(f"shape of input {name!r} unknown")
        params.extend(("?", int(d)) for d in shape)
    return (*params, *flat_attrs)
