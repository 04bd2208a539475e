"""Fitting operation parameters to a benchmark's param_descr: by name, by permutation, by order."""

from __future__ import annotations

import logging

import pytest

from dlbench.core.values import Operation
from dlbench.operators.align import AlignmentError, Permutation, PermutationError, align_operation, parse_param_descr


def op(params, shapes=()) -> Operation:
    return Operation(id=0, op_type="X", params=tuple(params), input_shapes=tuple(shapes))


def test_parameters_are_reordered_by_descriptor_and_surplus_discarded() -> None:
    operation = op([("N", 8), ("C", 3), ("H", 32), ("W", 32), ("alpha", 0.5), ("mode", 0)])
    assert align_operation(operation, ["W", "H", "C", "N"]) == [32, 32, 3, 8]


def test_original_comma_separated_param_descr_is_accepted() -> None:
    assert parse_param_descr("N, C,H , W") == ["N", "C", "H", "W"]
    with pytest.raises(AlignmentError, match="empty descriptor"):
        parse_param_descr("N,,C")


def test_unmatched_descriptors_are_assigned_by_order_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    operation = op([("N", 8), ("?", 64), ("?", 56), ("W", 55)])
    with caplog.at_level(logging.WARNING):
        values = align_operation(operation, ["N", "C", "H", "W"], entry_name="my_bench")
    assert values == [8, 64, 56, 55]
    assert "C, H not found by name" in caplog.text and "my_bench" in caplog.text


def test_too_few_parameters_name_the_missing_descriptors() -> None:
    with pytest.raises(AlignmentError, match="lacks C, H, W"):
        align_operation(op([("N", 8)]), ["N", "C", "H", "W"], entry_name="e")


def test_permutation_maps_shapes_to_parameters() -> None:
    strategy = Permutation.parse("ab,bc -> abc00")
    assert strategy.apply([(16, 32), (32, 8)]) == [16, 32, 8, 0, 0]
    assert strategy.apply([(16, 32), (31, 8)]) is None  # inner dimensions differ
    assert strategy.apply([(16, 32)]) is None  # wrong number of inputs
    assert strategy.apply([(4, 16, 32), (32, 8)]) is None  # wrong rank


def test_first_fitting_permutation_strategy_wins() -> None:
    strategies = [Permutation.parse("ab,bc -> abc001"), Permutation.parse("xab,xbc -> abc00x")]
    batched = op([("?", 4), ("?", 16), ("?", 32)], shapes=[(4, 16, 32), (4, 32, 8)])
    plain = op([("?", 16)], shapes=[(16, 32), (32, 8)])
    descr = ["M", "K", "N", "transA", "transB", "batch"]
    assert align_operation(batched, descr, strategies) == [16, 32, 8, 0, 0, 4]
    assert align_operation(plain, descr, strategies) == [16, 32, 8, 0, 0, 1]


def test_named_parameters_take_precedence_over_permutations() -> None:
    operation = op([("M", 1), ("K", 2), ("N", 3)], shapes=[(16, 32), (32, 8)])
    assert align_operation(operation, ["M", "K", "N"], [Permutation.parse("ab,bc -> abc")]) == [1, 2, 3]


def test_permutation_length_must_match_param_descr() -> None:
    operation = op([], shapes=[(16, 32), (32, 8)])
    with pytest.raises(AlignmentError, match="yields 5 values, param_descr has 3"):
        align_operation(operation, ["M", "K", "N"], [Permutation.parse("ab,bc -> abc00")], "e")


@pytest.mark.parametrize("text", ["ab,bc", "ab,bc -> abz", "-> ", "ab;bc -> ab", "a b -> ab"])
def test_malformed_permutations_are_rejected(text: str) -> None:
    with pytest.raises(PermutationError, match="permutation"):
        Permutation.parse(text)
