"""Operations described by the original tool's descriptors: canonical parameters for the operators dlbench knows,
``?`` plus flattened attributes for the others."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dlbench.core.costs import window_outputs
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.glue import (
    BINARY,
    COMPARISONS,
    GLUE_OP_TYPES,
    LOGICAL,
    MOVEMENT,
    PREDICATES,
    REDUCTIONS,
    UNARY,
    VARIADIC,
)
from dlbench.core.shapes import Shape, along_axis4, axis4, broadcast4, rank4, rank4_spatial, reduce4, transpose4
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
        int(len(shapes) > 2 and shapes[2] is not None),  # bias: the optional third input
        mode,
    ]
    return tuple(zip(DESCRIPTORS["Conv"], (int(v) for v in values), strict=True))


def _pool(shapes: Sequence[Shape | None], attrs: Mapping[str, Any], op_type: str, mode: int = 0) -> Params:
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
    kernel, strides = _window_2d(kernel, rank, 1), _window_2d(strides, rank, 1)
    n, c, h, w = _spatial(x)
    ceil_mode = int(bool(attrs.get("ceil_mode", 0))) and int(_adds_windows((h, w), kernel, pads, strides))
    values = [n, c, h, w, *kernel, *pads, *strides, ceil_mode, mode]
    return tuple(zip(DESCRIPTORS[op_type], (int(v) for v in values), strict=True))


def _adds_windows(size: Sequence[int], kernel: Sequence[int], pads: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ceil mode keeps a window floor mode drops along an axis (else the two pose the same problem)."""
    return any(
        window_outputs(size[i], kernel[i], pads[i], pads[i + 2], strides[i], 1, True)
        != window_outputs(size[i], kernel[i], pads[i], pads[i + 2], strides[i], 1, False)
        for i in range(2)
    )


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
    op_type: str,
    shapes: Sequence[Shape | None],
    attrs: Mapping[str, Any],
    opset: int,
    training: bool,
    outputs: Sequence[Shape | None] = (),
    values: Sequence[Sequence[Number] | None] = (),
) -> Params | None:
    """Canonical parameters of a known operator, or None when the op_type has none (or, for Slice, Expand,
    Tile, Split and reductions with axes as an input, when neither ``outputs`` (the output shapes) nor
    ``values`` (the values of constant inputs, by position) say what the node computes)."""
    first = shapes[0] if shapes else None
    if op_type in GLUE_OP_TYPES:
        if first is None:
            raise CannotDescribe("input shape unknown")
        described = _glue(op_type, shapes, attrs, opset, outputs, values)
        return None if described is None else tuple(zip(DESCRIPTORS[op_type], described, strict=True))
    if op_type == "Conv":
        return _conv(shapes, attrs, mode=0)
    if op_type in ("MaxPool", "AveragePool"):
        return _pool(shapes, attrs, op_type, mode=0 if training else 2)  # 2: inference, no max positions kept
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


def _sized(items: Sequence[Any], index: int) -> Any:
    return items[index] if len(items) > index else None


def _listed(values: Sequence[Any], index: int) -> list[Number] | None:
    """The values of constant input ``index`` as a flat list (a numpy array of any rank, or a sequence)."""
    value = _sized(values, index)
    if value is None:
        return None
    if hasattr(value, "reshape"):
        return list(value.reshape(-1).tolist())
    return list(value) if isinstance(value, list | tuple) else [value]


def _folded(shapes: Sequence[Shape], op_type: str) -> list[Shape]:
    folded = broadcast4(shapes)
    if folded is None:
        raise NoCanonicalForm(f"{op_type} broadcasts among leading axes of shapes {[list(s) for s in shapes]}")
    return folded


def _along(shape: Shape, attrs: Mapping[str, Any], op_type: str) -> tuple[Shape, int]:
    axis = int(attrs.get("axis", 0))
    if not -max(len(shape), 1) <= axis < max(len(shape), 1):
        raise CannotDescribe(f"{op_type}: axis {axis} outside a rank-{len(shape)} input")
    return along_axis4(shape, axis)


def _reduced_axes(
    x: Shape, shapes: Sequence[Shape | None], attrs: Mapping[str, Any], out: Shape | None, values: Sequence[Any]
) -> list[int] | None:
    """The axes a ReduceMean/ReduceSum reduces: its attribute (older opsets), the values of its constant
    ``axes`` input, else what the output shape shows (keepdims); None when nothing says."""
    if "axes" in attrs:
        axes = attrs["axes"]
    elif _sized(shapes, 1) is not None:  # axes as an input (ReduceSum from opset 13, ReduceMean from 18)
        axes = _listed(values, 1)
    else:
        axes = []
    if axes is not None:
        if len(axes):
            return [int(a) for a in axes]
        return [] if int(attrs.get("noop_with_empty_axes", 0)) else list(range(len(x)))
    if out is not None and int(attrs.get("keepdims", 1)) and len(out) == len(x):
        return [i for i, (a, b) in enumerate(zip(x, out, strict=True)) if a != b]
    return None


def _glue(
    op_type: str,
    shapes: Sequence[Shape | None],
    attrs: Mapping[str, Any],
    opset: int,
    outputs: Sequence[Shape | None],
    values: Sequence[Sequence[Number] | None],
) -> tuple[Number, ...] | None:
    """Canonical values of a glue operator in ``DESCRIPTORS`` order (see :mod:`dlbench.core.descriptors`)."""
    x = shapes[0]
    assert x is not None
    out = _sized(outputs, 0)
    if op_type in (*UNARY, *PREDICATES):
        return (*rank4(op_type, x), 0)
    if op_type == "Gelu":
        return (*rank4(op_type, x), 1 if attrs.get("approximate", "none") == "tanh" else 0, 0)
    if op_type == "Cast":
        return (*rank4(op_type, x), int(attrs["to"]), 0)
    if op_type == "LRN":
        size = int(attrs["size"])
        alpha, beta, bias = (float(attrs.get(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
        return (*_spatial(x), size, alpha, beta, bias, 0)
    present = [s for s in shapes if s is not None]
    if len(present) != len(shapes) and op_type not in ("Split", "Slice", "Expand", "Tile", *REDUCTIONS):
        raise CannotDescribe("an input shape is unknown")
    if op_type in (*BINARY, *COMPARISONS, *LOGICAL):
        a, b = _folded(present[:2], op_type)
        return (*a, *b, 0)
    if op_type in VARIADIC:
        if any(s != present[min(1, len(present) - 1)] for s in present[1:]):
            raise NoCanonicalForm(f"{op_type} of inputs {[list(s) for s in present]}: the second and later differ")
        a, b = _folded([present[0], present[min(1, len(present) - 1)]], op_type)
        return (*a, *b, len(present), 0)
    if op_type == "Where":
        c, a, b = _folded(present[:3], op_type)
        return (*c, *a, *b, 0)
    if op_type in (*MOVEMENT, "GatherElements"):
        return _movement(op_type, x, present, attrs, outputs, values)
    if op_type in REDUCTIONS:
        axes = _reduced_axes(x, shapes, attrs, out, values)
        if axes is None:
            return None
        folded = reduce4(x, axes)
        if folded is None:
            raise NoCanonicalForm(f"{op_type} over axes {axes} of {list(x)} keeps more than four axes apart")
        return (*folded[0], *folded[1], 0)
    return None


def _movement(
    op_type: str,
    x: Shape,
    present: Sequence[Shape],
    attrs: Mapping[str, Any],
    outputs: Sequence[Shape | None],
    values: Sequence[Sequence[Number] | None],
) -> tuple[Number, ...] | None:
    """Canonical values of a data-movement operator (Concat, Split, Transpose, Gather, GatherElements, Slice,
    Expand, Tile): the input and output folded to rank 4 with the axis they act along."""
    out = _sized(outputs, 0)
    if op_type == "Concat":
        axis = int(attrs["axis"]) % len(x)
        joined = (*x[:axis], sum(s[axis] for s in present), *x[axis + 1 :])
        shape4, along = _along(joined, attrs, op_type)
        return (*shape4, along, len(present), 0)
    if op_type == "Split":
        count = len(outputs) or int(attrs.get("num_outputs", 0)) or len(attrs.get("split") or [])
        count = count or len(_listed(values, 1) or [])
        if not count:
            return None
        shape4, axis = _along(x, attrs, op_type)
        return (*shape4, axis, count, 0)
    if op_type == "Transpose":
        folded = transpose4(x, attrs.get("perm") or list(reversed(range(len(x)))))
        if folded is None:
            raise NoCanonicalForm(f"Transpose {attrs.get('perm')} of {list(x)} keeps more than four axes apart")
        return (*folded[0], *folded[1], 0)
    if op_type == "Gather":
        indices = present[1]
        shape4, axis = _along(x, attrs, op_type)
        return (*shape4, axis, math.prod(indices), 0)
    if op_type == "GatherElements":
        indices = present[1]
        rank, axis = len(x), int(attrs.get("axis", 0)) % max(len(x), 1)
        if len(indices) != rank:
            raise CannotDescribe(f"GatherElements: indices of rank {len(indices)} for data of rank {rank}")
        if rank > 4 and (axis < rank - 3 or x[: rank - 3] != indices[: rank - 3]):
            raise NoCanonicalForm(f"GatherElements along axis {axis} of a rank-{rank} tensor has no rank-4 form")
        return (*rank4(op_type, x), *rank4(op_type, indices), axis4(axis, rank), 0)
    if op_type in ("Slice", "Expand", "Tile"):
        given = _listed(values, 1)
        if out is None and op_type == "Expand" and given is not None:
            out = tuple(int(d) for d in given)
        if out is None and op_type == "Tile" and given is not None:
            out = tuple(d * int(r) for d, r in zip(x, given, strict=True))
        if out is None:
            return None
        a, b = _folded([x, out], op_type) if op_type == "Expand" else (rank4(op_type, x), rank4(op_type, out))
        if op_type == "Expand":
            b = tuple(max(i, o) for i, o in zip(a, b, strict=True))
        if op_type != "Expand" and len(x) > 4 and out[: len(x) - 3] != x[: len(x) - 3]:
            raise NoCanonicalForm(f"{op_type} changes leading axes of a rank-{len(x)} tensor, which fold together")
        if op_type == "Tile":
            return (*a, *(o // i for i, o in zip(a, b, strict=True)), 0)
        return (*a, *b, 0)
    return None


def describe_unknown(shapes: Sequence[Shape | None], names: Sequence[str], flat_attrs: Params) -> Params:
    params: list[tuple[str, Number]] = []
    for name, shape in zip(names, shapes, strict=True):
        if not name:
            continue
        if shape is None:
            raise CannotDescribe(f"shape of input {name!r} unknown")
        params.extend(("?", int(d)) for d in shape)
    return (*params, *flat_attrs)
