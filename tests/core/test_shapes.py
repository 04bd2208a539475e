"""One rank-4 folding: extraction describes with it and matching compares with it, so a profiled shape and
the extracted operation of the same tensor agree for every rank."""

from __future__ import annotations

import pytest

from dlbench.core.shapes import axis4, rank4, rank4_leading_ones, rank4_spatial


@pytest.mark.parametrize(
    ("shape", "leading", "spatial"),
    [
        ((5,), (1, 1, 1, 5), (1, 1, 1, 5)),
        ((2, 3), (1, 1, 2, 3), (2, 3, 1, 1)),
        ((2, 3, 7), (1, 2, 3, 7), (2, 3, 1, 7)),
        ((2, 3, 7, 9), (2, 3, 7, 9), (2, 3, 7, 9)),
        ((2, 3, 4, 5, 6), (6, 4, 5, 6), (2, 3, 4, 30)),
    ],
)
def test_every_rank_folds_to_four_dimensions_keeping_the_element_count(shape, leading, spatial) -> None:
    assert rank4_leading_ones(shape) == leading and rank4_spatial(shape) == spatial
    count = 1
    for d in shape:
        count *= d
    assert (
        count == leading[0] * leading[1] * leading[2] * leading[3] == spatial[0] * spatial[1] * spatial[2] * spatial[3]
    )


def test_the_op_type_chooses_the_folding() -> None:
    assert rank4("Relu", (2, 3)) == (1, 1, 2, 3) and rank4("BatchNormalization", (2, 3)) == (2, 3, 1, 1)


@pytest.mark.parametrize(("axis", "rank", "expected"), [(-1, 2, 3), (0, 2, 2), (1, 3, 2), (-1, 5, 3), (0, 5, 0)])
def test_an_axis_follows_its_dimension_through_the_folding(axis: int, rank: int, expected: int) -> None:
    assert axis4(axis, rank) == expected


def test_extraction_and_matching_fold_a_layernorm_input_alike() -> None:
    from dlbench.analysis.match import _nchw_fields
    from dlbench.onnx.describe import describe_known

    params = dict(describe_known("LayerNormalization", [(2, 3, 4, 5, 6)], {"axis": -1}, 17, True))
    assert _nchw_fields("LayerNormalization", (2, 3, 4, 5, 6)) == {d: params[d] for d in "NCHW"}
