"""Rank-4 folding of tensor shapes, the one place that decides how an N-D tensor becomes ``N, C, H, W``.

Extraction describes operations with it, matching compares profiled shapes through it and the training
step builds optimizer problems with it, so all three must agree: they call these functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from dlbench.core.glue import GLUE_OP_TYPES

Shape = tuple[int, ...]

#: Op types whose tensors are described elementwise-style (leading 1s); the others as (N, C, spatial...).
LEADING_ONES_STYLE = frozenset(
    {"Relu", "Add", "Softmax", "LayerNormalization", "SGD", "Adam", "AdamW", "RMSprop"}
    | {"ZeroGrad", "ClipGradNorm", "MSELoss", "BCEWithLogitsLoss"}
    | (set(GLUE_OP_TYPES) - {"LRN"})  # LRN runs across channels: (N, C, spatial...)
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


def along_axis4(shape: Sequence[int], axis: int) -> tuple[Shape, int]:
    """The rank-4 form of a tensor that an operation cuts or indexes along ``axis`` (Concat, Split, Gather),
    and where the axis lands: leading 1s as usual; when the axis is one of the leading axes a rank above 4
    folds together, the axes before it fold into one and those after it into another instead (the same
    memory, the axis kept)."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    axis = axis % rank if rank else 0
    if rank <= 4 or axis >= rank - 3:
        return rank4_leading_ones(shape), axis4(axis, rank)
    return (1, math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])), 2


def _coalesced(shapes: list[list[int]], mergeable: Callable[[list[list[int]], int], bool]) -> list[list[int]]:
    """Merge neighbouring axes ``i, i+1`` of all ``shapes`` alike, from the left, while there are more than
    four and ``mergeable(shapes, i)`` says the merge keeps the operation's meaning."""
    i = 0
    while len(shapes[0]) > 4 and i < len(shapes[0]) - 1:
        if mergeable(shapes, i):
            shapes = [[*s[:i], s[i] * s[i + 1], *s[i + 2 :]] for s in shapes]
        else:
            i += 1
    return shapes


def broadcast4(shapes: Sequence[Sequence[int]]) -> list[Shape] | None:
    """Rank-4 forms of tensors that broadcast together (ONNX's multidirectional broadcasting: align the
    trailing axes): leading 1s up to rank 4; above, neighbouring axes merge where every tensor either
    spans both or broadcasts along both. None when more than four axes remain."""
    rank = max((len(s) for s in shapes), default=0)
    padded = [[1] * (rank - len(s)) + [int(d) for d in s] for s in shapes]
    if rank > 4:
        out = [max(s[i] for s in padded) for i in range(rank)]

        def mergeable(current: list[list[int]], i: int) -> bool:
            result = current[-1]
            return all((s[i], s[i + 1]) in ((result[i], result[i + 1]), (1, 1)) for s in current[:-1])

        merged = _coalesced([*padded, out], mergeable)
        padded = merged[:-1]
        if len(padded[0]) > 4:
            return None
    return [rank4_leading_ones(s) for s in padded]


def transpose4(shape: Sequence[int], perm: Sequence[int]) -> tuple[Shape, Shape] | None:
    """The rank-4 form of a Transpose: input shape and permutation. Up to rank 4, leading 1s; above, axes of
    size 1 are dropped and neighbouring axes that stay neighbours merge (ShuffleNet's (N, g, C/g, H, W)
    -> (0, 2, 1, 3, 4) becomes (N, g, C/g, H*W) -> (0, 2, 1, 3)). None when more than four axes remain."""
    shape = [int(d) for d in shape]
    rank = len(shape)
    perm = [int(p) % rank for p in perm] if rank else []
    if rank > 4:
        kept = [a for a in range(rank) if shape[a] != 1]
        renumber = {a: i for i, a in enumerate(kept)}
        shape, perm = [shape[a] for a in kept], [renumber[p] for p in perm if p in renumber]
        groups: list[list[int]] = []
        for p in perm:
            if groups and groups[-1][-1] + 1 == p:
                groups[-1].append(p)
            else:
                groups.append([p])
        if len(groups) > 4:
            return None
        order = sorted(range(len(groups)), key=lambda g: groups[g][0])
        shape = [math.prod(shape[a] for a in groups[g]) for g in order]
        perm = [order.index(g) for g in range(len(groups))]
        rank = len(shape)
    pad = 4 - rank
    return (1,) * pad + tuple(shape), (*range(pad), *(p + pad for p in perm))


def reduce4(shape: Sequence[int], axes: Sequence[int]) -> tuple[Shape, Shape] | None:
    """The rank-4 form of a reduction over ``axes``: the input shape and 0/1 flags of the reduced
    dimensions. Above rank 4, neighbouring axes that are both reduced or both kept merge; None when more
    than four axes remain."""
    rank = len(shape)
    chosen = {int(a) % rank for a in axes} if rank else set()
    flags = [int(a in chosen) for a in range(rank)]
    dims = [int(d) for d in shape]
    if rank > 4:
        dims, flags = _coalesced([dims, flags], lambda current, i: current[1][i] == current[1][i + 1])
        flags = [min(f, 1) for f in flags]  # merged flags multiply: 1*1 or 0*0
        if len(dims) > 4:
            return None
    pad = 4 - len(dims)
    return (1,) * pad + tuple(dims), (0,) * pad + tuple(flags)
