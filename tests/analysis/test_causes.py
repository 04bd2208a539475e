"""Causes of outliers: which recorded properties are flagged, when a re-timing reproduces a slowdown, and what
the reproduced causes add to the step."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlbench.analysis.causes import (
    cause_lines,
    flags_of,
    interpret,
    reproduces,
    retime_items,
    unrecorded,
    with_causes_ms,
)
from dlbench.analysis.match import MatchResult
from dlbench.core.outliers import OutliersConfig

QUIET = {"torch_threads": 1, "physical_cores": 2, "logical_cpus": 2, "children_runnable_threads": 0.0}


def tensor(shape, strides=None, dtype="float32", **stats):
    strides = strides or [shape[1], 1]
    contiguous = strides == [shape[1], 1]
    return {"tensor": {"dtype": dtype, "shape": shape, "strides": strides, "contiguous": contiguous,
                       "numel": shape[0] * shape[1], **stats}}  # fmt: skip


def call(name, *args):
    return {"name": name, "overload": "default", "shapes": [a["tensor"]["shape"] for a in args],
            "args": list(args), "kwargs": {}, "calls": 1}  # fmt: skip


def test_a_plain_call_has_no_flags_and_each_property_is_flagged_with_what_was_seen():
    assert flags_of(call("aten::mul", tensor([8, 4]), tensor([8, 4])), QUIET, "float32") == {}
    flags = flags_of(
        call("aten::mul", tensor([8, 4], subnormal=0.31, nonfinite=0.02), tensor([8, 4], [1, 8], dtype="float64")),
        {"torch_threads": 1, "physical_cores": 2, "children_runnable_threads": 2.0}, "float32",
    )  # fmt: skip
    assert set(flags) == {"subnormal", "nonfinite", "strides", "dtype", "threads"}
    assert "31%" in flags["subnormal"] and "strides [1, 8]" in flags["strides"] and "float64" in flags["dtype"]


def test_a_transposed_matrix_handed_to_blas_is_not_flagged_but_one_handed_to_an_elementwise_op_is():
    transposed = tensor([8, 4], [1, 8])
    assert "strides" not in flags_of(call("aten::mm", tensor([2, 8]), transposed), QUIET, "float32")
    assert "strides" in flags_of(call("aten::add", tensor([8, 4]), transposed), QUIET, "float32")


@pytest.mark.parametrize(
    ("retimed", "observed", "expected"),
    [(10.0, 57.0, True), (1.9, 2.4, True), (1.5, 2.4, False), (1.2, 1.5, False), (math.nan, 3.0, False)],
)
def test_a_retiming_reproduces_at_three_quarters_of_the_ratio_or_outside_the_band(retimed, observed, expected):
    # 57x observed: 10x re-timed is outside the band on its own; 2.4x observed: 1.9x is over 3/4 of it (1.8)
    assert reproduces(retimed, observed, OutliersConfig()) is expected


def test_only_flagged_calls_of_slower_outliers_are_retimed_and_reproduced_ones_add_their_time():
    outliers = pd.DataFrame([
        {"id": 1, "name": "/Mul", "op_type": "Mul", "pass": "forward", "direction": "slower", "ratio": 8.0,
         "predicted_ms": 1.0},
        {"id": 2, "name": "/Gemm", "op_type": "Gemm", "pass": "forward", "direction": "slower", "ratio": 3.0,
         "predicted_ms": 5.0},
    ])  # fmt: skip
    rows = pd.DataFrame([{"name": "aten::mul", "input_shapes": "[[8, 4], [8, 4]]", "time_us": 8000.0},
                         {"name": "aten::mm", "input_shapes": "[[2, 8], [8, 4]]", "time_us": 15000.0}])  # fmt: skip
    match = MatchResult(rows, {1: 8000.0, 2: 15000.0}, ((0, 1, 8000.0), (1, 2, 15000.0)))
    strided = call("aten::mul", tensor([8, 4]), tensor([8, 4], [1, 8]))
    strided["calls"] = 2
    calls = [strided, call("aten::mm", tensor([2, 8]), tensor([8, 4], [1, 8]))]
    items = retime_items(outliers, match, calls, QUIET, "float32")
    assert [(i["id"], i["flags"], i["variants"]) for i in items] == [(1, ["strides"], ["plain", "strides"])]
    results = [{"key": items[0]["key"], "ms": {"plain": 0.25, "strides": 1.5}}]
    causes = interpret(items, results, outliers, OutliersConfig())
    assert causes["reproduced"].tolist() == [True] and causes["retimed_ratio"].tolist() == pytest.approx([6.0])
    assert with_causes_ms(causes, results, items) == pytest.approx((1.5 - 0.25) * 2), "two calls per step"
    results = [{"key": items[0]["key"], "ms": {"plain": 0.25, "strides": 0.26}}]
    assert with_causes_ms(interpret(items, results, outliers, OutliersConfig()), results, items) is None


def test_an_outlier_whose_calls_were_not_recorded_says_so_instead_of_clearing_its_inputs():
    outliers = pd.DataFrame([{"id": 7, "name": "SGD_N1", "op_type": "SGD", "pass": "optimizer",
                              "direction": "slower", "ratio": 3.0, "predicted_ms": 7.0}])  # fmt: skip
    rows = pd.DataFrame([{"name": "dlbench::optimizer_step#SGD", "input_shapes": "[]", "time_us": 21000.0}])
    match = MatchResult(rows, {7: 21000.0}, ((0, 7, 21000.0),))
    missing = unrecorded(outliers, match, [call("aten::mul", tensor([8, 4]))])
    assert missing == {7: ["dlbench::optimizer_step#SGD"]}
    empty = interpret([], [], outliers, OutliersConfig())
    assert "not checked" in cause_lines(empty, outliers, missing)[7][0]
    assert "as benchmarked" in cause_lines(empty, outliers, {})[7][0]


def test_outliers_on_a_machine_busier_than_its_logical_cpus_come_with_a_warning_naming_cpus_and_cores():
    from dlbench.analysis.causes import busy_machine_lines

    found = pd.DataFrame([{"id": 1}])
    busy = {"load_average_start": 8.1, "covered_ratio_training_to_benchmark": 3.3}
    line = busy_machine_lines(found, busy, cpus=2, cores=2)[0]
    assert "busy (load average 8.1 on 2 logical CPUs at the start)" in line
    assert "3.3x" in line
    # two hyper-threads per core: the load average counts against the logical CPUs, the cores are named apart
    assert "on 4 logical CPUs, 2 physical cores at the start" in busy_machine_lines(found, busy, cpus=4, cores=2)[0]
    assert busy_machine_lines(found, {"load_average_start": 1.5}, cpus=2, cores=2) == []
    assert busy_machine_lines(found, {"load_average_start": 3.5}, cpus=4, cores=2) == []
    assert busy_machine_lines(found.iloc[:0], busy, cpus=2, cores=2) == []


def two_mul_calls_of_one_outlier(second):
    """One slower outlier whose two costliest profiled calls are both aten::mul, at different shapes."""
    outliers = pd.DataFrame([{"id": 1, "name": "/Mul", "op_type": "Mul", "pass": "forward", "direction": "slower",
                              "ratio": 8.0, "predicted_ms": 1.0}])  # fmt: skip
    rows = pd.DataFrame([{"name": "aten::mul", "input_shapes": "[[8, 4], [8, 4]]", "time_us": 8000.0},
                         {"name": "aten::mul", "input_shapes": "[[16, 4], [16, 4]]", "time_us": 4000.0}])  # fmt: skip
    match = MatchResult(rows, {1: 12000.0}, ((0, 1, 8000.0), (1, 1, 4000.0)))
    calls = [call("aten::mul", tensor([8, 4]), tensor([8, 4], [1, 8])), second]
    return outliers, retime_items(outliers, match, calls, QUIET, "float32")


def test_a_cause_reproduced_on_one_call_adds_nothing_for_another_call_of_the_same_operator():
    # both calls strided; only the first reproduces (6x); the second re-timed 1.1x adds nothing
    outliers, items = two_mul_calls_of_one_outlier(call("aten::mul", tensor([16, 4]), tensor([16, 4], [1, 16])))
    assert [i["flags"] for i in items] == [["strides"], ["strides"]]
    results = [{"key": items[0]["key"], "ms": {"plain": 0.25, "strides": 1.5}},
               {"key": items[1]["key"], "ms": {"plain": 1.0, "strides": 1.1}}]  # fmt: skip
    causes = interpret(items, results, outliers, OutliersConfig())
    assert causes["reproduced"].tolist() == [True, False]
    assert with_causes_ms(causes, results, items) == pytest.approx(1.5 - 0.25)


def test_a_call_without_the_cause_another_call_reproduced_is_left_alone_rather_than_failing():
    # the second call's only property is a float64 input, not reproduced: its times have no "strides" variant
    outliers, items = two_mul_calls_of_one_outlier(call("aten::mul", tensor([16, 4]), tensor([16, 4], dtype="float64")))
    results = [{"key": items[0]["key"], "ms": {"plain": 0.25, "strides": 1.5}},
               {"key": items[1]["key"], "ms": {"plain": 1.0, "dtype": 1.02}}]  # fmt: skip
    causes = interpret(items, results, outliers, OutliersConfig())
    assert with_causes_ms(causes, results, items) == pytest.approx(1.5 - 0.25)


def test_a_time_that_is_not_a_number_adds_nothing_to_the_step_with_causes():
    outliers, items = two_mul_calls_of_one_outlier(call("aten::mul", tensor([16, 4]), tensor([16, 4], [1, 16])))
    results = [{"key": items[0]["key"], "ms": {"plain": 0.25, "strides": 1.5}},
               {"key": items[1]["key"], "ms": {"plain": 0.5, "strides": 2.0}}]  # fmt: skip
    causes = interpret(items, results, outliers, OutliersConfig())
    assert causes["reproduced"].tolist() == [True, True]
    # the times the step's figure is taken from: the second call's plain time did not come back as a number
    results[1]["ms"]["plain"] = math.nan
    assert with_causes_ms(causes, results, items) == pytest.approx(1.5 - 0.25)
    results[0]["ms"]["strides"] = math.nan
    assert with_causes_ms(causes, results, items) is None, "no call left with a time to add"


def test_the_subnormal_cause_says_whether_the_step_already_flushed_them():
    seen = call("aten::mul", tensor([8, 4], subnormal=0.31), tensor([8, 4]))
    flushed = flags_of(seen, {**QUIET, "flush_denormal": True}, "float32")["subnormal"]
    kept = flags_of(seen, {**QUIET, "flush_denormal": False}, "float32")["subnormal"]
    assert "the step flushed them to zero" in flushed and "set_flush_denormal(True)" in flushed
    assert "the step did not flush them" in kept


def test_subnormals_are_retimed_with_the_steps_flushing():
    outliers = pd.DataFrame([{"id": 1, "name": "/Mul", "op_type": "Mul", "pass": "forward", "direction": "slower",
                              "ratio": 8.0, "predicted_ms": 1.0}])  # fmt: skip
    rows = pd.DataFrame([{"name": "aten::mul", "input_shapes": "[[8, 4], [8, 4]]", "time_us": 8000.0}])
    match = MatchResult(rows, {1: 8000.0}, ((0, 1, 8000.0),))
    calls = [call("aten::mul", tensor([8, 4], subnormal=0.31), tensor([8, 4]))]
    for flushed in (True, False):
        items = retime_items(outliers, match, calls, {**QUIET, "flush_denormal": flushed}, "float32")
        assert [i["flush_denormal"] for i in items] == [flushed]


def test_step_threads_beyond_the_physical_cores_are_flagged_though_logical_cpus_remain():
    # two threads on one core's two hyper-threads share its execution units
    machine = {"torch_threads": 2, "physical_cores": 1, "logical_cpus": 2, "children_runnable_threads": 0.0}
    flags = flags_of(call("aten::mul", tensor([8, 4]), tensor([8, 4])), machine, "float32")
    assert "1 physical core(s)" in flags["threads"]


@pytest.mark.slow
def test_a_call_is_retimed_in_the_dtype_it_ran_not_the_sweeps(tmp_path):
    """A float64 GELU (a script that ran in float64) is benchmarked in float64, as it ran: its dtype is no cause,
    and its plain re-timing runs in float64, as fast as the recorded dtype (float32 would be many-fold faster:
    float64 erf is not vectorised)."""
    from dlbench.backends.torch.retime import retime_calls

    n = 512
    outliers = pd.DataFrame([{"id": 1, "name": "/Gelu", "op_type": "Gelu", "pass": "forward", "direction": "slower",
                              "ratio": 8.0, "predicted_ms": 1.0}])  # fmt: skip
    rows = pd.DataFrame([{"name": "aten::gelu", "input_shapes": f"[[{n}, {n}]]", "time_us": 8000.0}])
    match = MatchResult(rows, {1: 8000.0}, ((0, 1, 8000.0),))
    transposed = call("aten::gelu", tensor([n, n], [1, n], dtype="float64"))
    (item,) = retime_items(outliers, match, [transposed], QUIET, "float32")
    assert item["flags"] == ["strides"] and item["dtype"] == "float64"
    bfloat = call("aten::mm", tensor([2, 8], dtype="bfloat16"), tensor([8, 4], dtype="bfloat16"))
    assert "dtype" not in flags_of(bfloat, QUIET, "bfloat16") and "dtype" in flags_of(bfloat, QUIET, "float32")
    item["variants"].append("dtype")  # the recorded dtypes, contiguous: what plain must run as
    (result,) = retime_calls([item], tmp_path, threads=1, dtype="float32", timeout=300)
    assert result["ms"]["dtype"] < 2 * result["ms"]["plain"], result
