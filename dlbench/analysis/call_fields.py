"""A profiled call's recorded inputs -> the descriptors they determine, for matching it to the operations of a
training step (:mod:`dlbench.analysis.match`): a convolution's input and weight shapes, a GEMM's problem up to
transposition, a cast's shape and its two dtypes (the readers that take the recorded dtypes too)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from dlbench.core.dtypes import ELEMENT_TYPES, FLOAT_TYPES, MEMORY_FORMATS
from dlbench.core.shapes import Shape, rank4, rank4_spatial
from dlbench.core.values import Operation


def json_list(value: Any) -> list[Any]:
    """A profile column that holds a list (``input_shapes``, ``input_types``): the list itself, or parsed from its
    JSON text; ``[]`` for anything else (an empty cell, text that is no JSON list)."""
    if isinstance(value, list | tuple):
        return list(value)
    try:
        parsed = json.loads(value) if isinstance(value, str) and value else []
    except json.JSONDecodeError:
        return []
    return parsed if isinstance(parsed, list) else []


GEMM_TYPES = frozenset({"Gemm", "MatMul"})


class MatchError(ValueError):
    """A matching table or profile that cannot be used; the message names the file and the entry."""


def _nchw_fields(op_type: str, shape: Sequence[int], suffix: str = "") -> dict[str, int]:
    return {f"{d}{suffix}": v for d, v in zip("NCHW", rank4(op_type, shape), strict=True)}


def gemm_signature(m: int, k: int, n: int, batch: int = 1) -> dict[str, Any]:
    """A GEMM up to transposition: C = A B and C^T = B^T A^T are the same problem."""
    return {"batch": int(batch), "K": int(k), "MN": (min(int(m), int(n)), max(int(m), int(n)))}


def operation_fields(op: Operation) -> dict[str, Any]:
    """The descriptors profile fields are compared with (GEMMs by their transposition-free signature)."""
    p = op.param_dict
    if op.op_type in GEMM_TYPES and all(d in p for d in ("M", "K", "N")):
        return gemm_signature(p["M"], p["K"], p["N"], p.get("batch", 1))
    if op.op_type == "Cast":  # a cast is also the dtype it converts from, a layout conversion the format it makes
        return {**p, "from": op.dtype, "into": op.memory_format or "contiguous"}
    return dict(p)


def _tensor(shapes: Sequence[Any], index: int, rank: int | tuple[int, ...] | None = None) -> Shape:
    if index >= len(shapes) or not isinstance(shapes[index], list) or not shapes[index]:
        raise MatchError(f"input {index} is not a tensor")
    shape = tuple(int(d) for d in shapes[index])
    ranks = (rank,) if isinstance(rank, int) else rank
    if ranks is not None and len(shape) not in ranks:
        raise MatchError(f"input {index} has rank {len(shape)}, expected {' or '.join(map(str, ranks))}")
    return shape


def _conv(x: Shape, w: Shape) -> dict[str, Any]:
    n, c, h, wd = rank4_spatial(x)
    kernel = (1, w[2]) if len(w) == 3 else (w[2], w[3])
    return {"N": n, "C": c, "H": h, "W": wd, "K": w[0], "kernel_shape_0": kernel[0], "kernel_shape_1": kernel[1]}


def _matmul(a: Shape, b: Shape) -> dict[str, Any]:
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    lead_a, lead_b = a2[:-2], b2[:-2]
    if not lead_b:
        return gemm_signature(m * math.prod(lead_a), k, n, 1)
    width = max(len(lead_a), len(lead_b))
    pa = (1,) * (width - len(lead_a)) + tuple(lead_a)
    pb = (1,) * (width - len(lead_b)) + tuple(lead_b)
    return gemm_signature(m, k, n, math.prod(max(x, y) for x, y in zip(pa, pb, strict=True)))


def _linear(x: Shape, w: Shape) -> dict[str, Any]:
    return gemm_signature(math.prod(x[:-1]) if len(x) > 1 else 1, x[-1], w[0], 1)


def _logits(x: Shape) -> dict[str, Any]:
    """A loss's input as (rows, classes): classes on the last axis, everything before it rows."""
    return {"N": math.prod(x[:-1]) if len(x) > 1 else 1, "C": x[-1] if x else 1}


ShapeReader = Callable[[str, Sequence[Any]], dict[str, Any]]

#: ``shapes`` kinds of the table: recorded input shapes -> the descriptors they determine.
SHAPE_READERS: dict[str, ShapeReader] = {
    "conv": lambda t, s: _conv(_tensor(s, 0, (3, 4)), _tensor(s, 1, (3, 4))),
    "conv_backward": lambda t, s: _conv(_tensor(s, 1, (3, 4)), _tensor(s, 2, (3, 4))),
    "gemm_addmm": lambda t, s: _matmul(_tensor(s, 1, 2), _tensor(s, 2, 2)),
    "gemm_mm": lambda t, s: _matmul(_tensor(s, 0, 2), _tensor(s, 1, 2)),
    "gemm_bmm": lambda t, s: _matmul(_tensor(s, 0, 3), _tensor(s, 1, 3)),
    "gemm_matmul": lambda t, s: _matmul(_tensor(s, 0), _tensor(s, 1)),
    "gemm_linear": lambda t, s: _linear(_tensor(s, 0), _tensor(s, 1, 2)),
    "first": lambda t, s: _nchw_fields(t, _tensor(s, 0)),
    "backward_grad_input": lambda t, s: _nchw_fields(t, _tensor(s, 1)),
    "pair": lambda t, s: {**_nchw_fields(t, _tensor(s, 0)), **_nchw_fields(t, _tensor(s, 1), "_b")},
    "logits": lambda t, s: _logits(_tensor(s, 0)),
    "logits_grad_input": lambda t, s: _logits(_tensor(s, 1)),
    "any": lambda t, s: {},
}


def _cast(op_type: str, shapes: Sequence[Any], types: Sequence[str], source: int) -> dict[str, Any]:
    """A cast's fields: its input's shape (input ``source``) and dtype (``from``), and for ``aten::copy_`` (whose
    input 0 is the destination) the ONNX element type it writes (``to``). A copy within one dtype is no cast."""
    shape = _tensor(shapes, source)
    dtype = types[source] if source < len(types) else ""
    if dtype not in FLOAT_TYPES:
        raise MatchError(f"input {source} is {dtype or 'not'} a floating-point tensor")
    fields = {**_nchw_fields(op_type, shape), "from": dtype}
    if source == 1:
        if types[0] == dtype or types[0] not in FLOAT_TYPES:
            raise MatchError(f"a copy from {dtype} to {types[0] or '?'} is no cast between floating dtypes")
        fields["to"] = ELEMENT_TYPES[types[0]]
    return fields


def layout_conversion(types: Sequence[Any], formats: Sequence[Any]) -> tuple[str, str, str] | None:
    """(dtype, source format, format converted into) of ``copy_(destination, source)``'s recorded inputs when it
    copies within one floating dtype between two memory formats; None for any other copy."""
    if len(types) < 2 or len(formats) < 2 or types[0] != types[1] or types[1] not in FLOAT_TYPES:
        return None
    into, source = str(formats[0]), str(formats[1])
    if into == source or not {into, source} <= set(MEMORY_FORMATS):
        return None
    return str(types[1]), source, into


def _copy(op_type: str, shapes: Sequence[Any], types: Sequence[str], formats: Sequence[str]) -> dict[str, Any]:
    """``aten::copy_(destination, source)``: a cast between two floating dtypes (:func:`_cast`), or within one
    dtype a layout conversion, a Cast to its own element type ``into`` the destination's memory format. A copy
    within one dtype and one layout (``.contiguous()`` of a view, a device transfer) is neither."""
    if len(types) < 2 or types[0] != types[1]:
        return _cast(op_type, shapes, types, 1)
    shape, conversion = _tensor(shapes, 1), layout_conversion(types, formats)
    if conversion is None:
        raise MatchError(f"a copy within {types[1] or 'one dtype'} is no cast and no layout conversion")
    dtype, _, into = conversion
    return {**_nchw_fields(op_type, shape), "from": dtype, "to": ELEMENT_TYPES[dtype], "into": into}


TypedReader = Callable[[str, Sequence[Any], Sequence[str], Sequence[str]], dict[str, Any]]

#: ``shapes`` kinds that read the recorded input dtypes (and memory formats) too: the casts (``aten::_to_copy``'s
#: input; ``aten::copy_`` from its source, input 1, into its destination's dtype or memory format).
TYPED_READERS: dict[str, TypedReader] = {
    "cast": lambda t, s, d, f: _cast(t, s, d, 0),
    "cast_copy": _copy,
}
