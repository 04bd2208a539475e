"""Rank-4 folding of tensor shapes, the one place that decides how an N-D tensor becomes ``N, C, H, W``.

Extraction describes operations with it, matching compares profiled shapes through it and the training
step builds optimizer problems with it, so all three must agree: they call these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = tuple[int, ...]

#: Op types whose tensors are described elementwise-style (leading 1s); the others as (N, C, spatial...).
LEADING_ONES_STYLE = frozenset({"Relu", "Add", "Softmax", "LayerNormalization", "SGD"})


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
