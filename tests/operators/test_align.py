"""Fitting operation parameters to a benchmark's param_descr: by name, by permutation, by order."""

from __future__ import annotations

import logging

import pytest

from dlbench.core.descriptors import CONV, GEMM
from dlbench.core.values import Operation
from dlbench.operators.align import (
    AlignmentError,
    Permutation,
    PermutationError,
    ProblemChanged,
    align_operation,
    misfit,
    parse_param_descr,
)


def op(params, shapes=()) -> Operation:
    return Operation(id=0, op_type="X", params=tuple(params), input_shapes=tuple(shapes))


def test_parameters_are_reordered_by_descriptor_and_surplus_at_neutral_values_discarded() -> None:
    operation = op([("N", 8), ("C", 3), ("H", 32), ("W", 32), ("epsilon", 1e-3), ("mode", 0)])
    assert align_operation(operation, ["W", "H", "C", "N"]) == [32, 32, 3, 8]


def conv(**overrides: float) -> Operation:
    values = dict(zip(CONV, [1, 32, 56, 56, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0], strict=True))
    values.update(overrides)
    return Operation(id=3, op_type="Conv", params=tuple(values.items()))


WITHOUT_GROUP = [d for d in CONV if d != "group"]


def test_a_depthwise_convolution_is_not_served_by_an_implementation_without_group() -> None:
    assert align_operation(conv(), WITHOUT_GROUP, entry_name="dense_only")[:5] == [1, 32, 56, 56, 32]
    with pytest.raises(ProblemChanged, match=r"dense_only: its param_descr has no group.*group=32"):
        align_operation(conv(group=32), WITHOUT_GROUP, entry_name="dense_only")


@pytest.mark.parametrize(
    ("operation", "param_descr", "named"),
    [
        (conv(dilations_0=2, dilations_1=2), [d for d in CONV if not d.startswith("dilations")], "dilations_0"),
        (conv(pads_2=2), [d for d in CONV if d not in ("pads_2", "pads_3")], "pads_2=2 (not equal to pads_0)"),
        (conv(mode=2), [d for d in CONV if d != "mode"], "mode=2"),
        (conv(has_bias=1), [d for d in CONV if d != "has_bias"], "has_bias=1 (only 0 may be left out)"),
        (
            Operation(0, "Gemm", tuple(zip(GEMM, [64, 32, 16, 1, 0, 1], strict=True))),
            ["M", "K", "N", "batch"],
            "transA=1",
        ),
        (op([("N", 8), ("C", 3), ("H", 32), ("W", 32), ("alpha", 0.5)]), ["N", "C", "H", "W"], "alpha=0.5 (no neutral"),
    ],
)
def test_a_dropped_descriptor_that_changes_the_problem_is_named(
    operation: Operation, param_descr: list[str], named: str
) -> None:
    with pytest.raises(ProblemChanged) as info:
        align_operation(operation, param_descr, entry_name="e")
    assert named in str(info.value)


def test_symmetric_pads_may_be_given_as_two_values() -> None:
    values = align_operation(
        conv(pads_0=2, pads_1=1, pads_2=2, pads_3=1), [d for d in CONV if d not in ("pads_2", "pads_3")]
    )
    assert values[7:9] == [2, 1]


def test_a_changed_problem_is_unsupported_and_a_missing_parameter_a_failure() -> None:
    with pytest.raises(ProblemChanged) as changed:
        align_operation(conv(group=32), WITHOUT_GROUP, entry_name="e")
    unsupported = misfit(3, changed.value)
    assert unsupported.unsupported and unsupported.status == "unsupported" and "group=32" in unsupported.error
    with pytest.raises(AlignmentError) as lacking:
        align_operation(op([("N", 8)]), ["N", "C", "H", "W"], entry_name="e")
    failed = misfit(0, lacking.value)
    assert not failed.unsupported and failed.status == "failed" and failed.error.startswith("parameters do not fit")


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


def test_an_entry_without_bias_or_ceil_mode_serves_unbiased_convolutions_and_floor_mode_pools_only() -> None:
    from dlbench.core.descriptors import POOL
    from dlbench.operators.registry import load_registry

    registry = load_registry()
    onednn_conv, onednn_pool = registry.operator("onednn_conv"), registry.operator("onednn_maxpool")
    assert align_operation(conv(), onednn_conv.param_descr, entry_name="onednn_conv")[-1] == 0
    # an operation described before has_bias existed (stored, or configured) is the unbiased problem
    older = Operation(3, "Conv", tuple((d, v) for d, v in conv().params if d != "has_bias"))
    (torch_conv,) = registry.serving("Conv", backend="torch", device="cpu")
    assert align_operation(older, torch_conv.param_descr) == align_operation(conv(), torch_conv.param_descr)
    with pytest.raises(ProblemChanged, match="has_bias=1"):
        align_operation(conv(has_bias=1), onednn_conv.param_descr, entry_name="onednn_conv")
    window = [1, 8, 8, 8, 3, 3, 0, 0, 0, 0, 2, 2]
    floor = Operation(1, "MaxPool", tuple(zip(POOL, [*window, 0, 2], strict=True)))
    ceil = Operation(2, "MaxPool", tuple(zip(POOL, [*window, 1, 2], strict=True)))
    assert align_operation(floor, onednn_pool.param_descr, entry_name="onednn_maxpool") == [*window, 2]
    with pytest.raises(ProblemChanged, match="ceil_mode=1"):
        align_operation(ceil, onednn_pool.param_descr, entry_name="onednn_maxpool")
