"""Rank-4 folding of tensor shapes, the one place that decides how an N-D tensor becomes ``N, C, H, W``.

Extraction describes operations with it, matching compares profiled shapes through it and the training
step builds optimizer problems with it, so all three must agree: they call these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = tuple[int, ...]

#: Op types whose tensors are described elementwise-style (leading 1s); the others as (N, C, spatial...).
LEADING_ONES_STYLE = frozenset(
    {"Relu", "Add", "Softmax", "LayerNormalization", "SGD"}
    | {"Sqrt", "Erf", "Gelu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Clip", "Cast"}
    | {"Mul", "Div", "Sub", "Pow", "Sum", "Max", "Min", "Where"}
    | {"Concat", "Split", "Slice", "Transpose", "Gather", "Expand", "Tile", "ReduceMean", "ReduceSum"}
)


def rank4_leading_ones(shape: Sequence[int]) -> Shape:
    """Rank 4 with leading 1s for lower ranks; leading dimensions of higher ranks fold into the first."""
    shape = tuple(int(d) for d in shape)
    if len(shape) <= 4:
        return (1,) * (4 - len(shape)) + shape
    return (math.prod(shape[: len(shape) - 3]), *shape[-3:])


def rank4_spatial(shape: Sequence[int]) -> Shape:
    """N, C, H, W for a tensor with batch and channel axes: H=1 for 1-D, W folds the remaining spatial
    dimensions for 3-D and more. Shapes of rank below 2 have no channel axis and take leading 1s."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
        return rank4_leading_ones(shape)
    n, c, rest = shape[0], shape[1], shape[2:]
    if not rest:
        return (n, c, 1, 1)
    if len(rest) == 1:
        return (n, c, 1, rest[0])
    return (n, c, rest[0], math.prod(rest[1:]))


def rank4(op_type: str, shape: Sequence[int]) -> Shape:
    """The rank-4 form an operation of ``op_type`` describes ``shape`` with."""
    return rank4_leading_ones(shape) if op_type in LEADING_ONES_STYLE else rank4_spatial(shape)


def axis4(axis: int, rank: int) -> int:
    """Where axis ``axis`` of a rank-``rank`` tensor lands after :func:`rank4_leading_ones`."""
    axis = axis % rank if rank else 0
    if rank <= 4:
        return axis + 4 - rank
    return max(0, axis - (rank - 4))


def folded_axis(axis: int, rank: int) -> bool:
    """Whether ``axis`` is one of several leading axes that :func:`rank4_leading_ones` merges into one, so an
    operation along it has no rank-4 form (the merged dimension is not that axis)."""
    return rank > 4 and axis % rank < rank - 3


def broadcast4(shapes: Sequence[Sequence[int]]) -> list[Shape] | None:
    """Rank-4 forms of tensors that broadcast together (ONNX's multidirectional broadcasting: align the
    trailing axes), folded alike so they still broadcast to the folded result; None when folding would
    change what broadcasts to what (leading axes of a rank above 4 that broadcast among themselves)."""
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(int(d) for d in s) for s in shapes]
    if rank <= 4:
        return [rank4_leading_ones(s) for s in padded]
    lead = rank - 3
    out = [max(s[i] for s in padded) for i in range(lead)]
    for s in padded:
        if list(s[:lead]) != out and any(d != 1 for d in s[:lead]):
            return None
    return [rank4_leading_ones(s) for s in padded]


def perm4(perm: Sequence[int], rank: int) -> Shape | None:
    """A Transpose's permutation of a rank-``rank`` tensor as a permutation of its rank-4 form; None when
    it moves any of the leading axes that fold into one."""
    perm = [int(p) % rank for p in perm] if rank else []
    if rank <= 4:
        pad = 4 - rank
        return (*range(pad), *(p + pad for p in perm))
    lead = rank - 3
    if perm[:lead] != list(range(lead)):
        return None
    return (0, *(p - lead + 1 for p in perm[lead:]))


def reduced4(axes: Sequence[int], rank: int) -> Shape | None:
    """Which rank-4 dimensions a reduction over ``axes`` of a rank-``rank`` tensor reduces, as 0/1 flags;
    None when it reduces some but not all of the leading axes that fold into one."""
    chosen = {int(a) % rank for a in axes} if rank else set()
    flags = [0, 0, 0, 0]
    if rank <= 4:
        for a in chosen:
            flags[a + 4 - rank] = 1
        return tuple(flags)
    lead = rank - 3
    lead_flags = {a in chosen for a in range(lead)}
    if len(lead_flags) > 1:
        return None
    flags[0] = int(lead_flags.pop())
    for a in chosen:
        if a >= lead:
            flags[a - lead + 1] = 1
    return tuple(flags)
