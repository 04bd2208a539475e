"""The metrics a run carries mean the same in every run: run-level scalars (totals weighted by occurrences,
per sample, GFLOP/s), per-operation metrics under names without the batch size (capped, costliest first),
and a workload digest that says which runs measured the same operations."""

from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf

from dlbench import CONF_DIR
from dlbench.analysis.results import (
    operation_key,
    operation_metrics,
    results_frame,
    summary_metrics,
    workload_digest,
)
from dlbench.config import BenchmarkConfig
from dlbench.core.resolvers import register_resolvers
from dlbench.core.values import Measurement, Operation, SweepResult, TimeStats
from dlbench.operators.workload import operations_from_benchmark


def _stats(ms: float) -> TimeStats:
    return TimeStats(median_ms=ms, min_ms=ms, max_ms=ms, mean_ms=ms, std_ms=0.0, iqr_ms=0.0, reps=3)


def _frame() -> pd.DataFrame:
    """Three operations: a (2 ms, 4 occurrences, 4e9 FLOPs), b (1 ms, once, no FLOPs), c failed."""
    operations = [
        Operation(0, "Conv", (("N", 8),), name="a", count=4, flops=4e9),
        Operation(1, "Relu", (("N", 8),), name="b", count=1),
        Operation(2, "Conv", (("N", 8),), name="c", count=2, flops=1e9),
    ]
    result = SweepResult({0: Measurement(0, _stats(2.0)), 1: Measurement(1, _stats(1.0)), 2: Measurement(2, None, "x")})
    return results_frame(operations, result)


def test_run_level_metrics_weight_each_operation_by_its_occurrences() -> None:
    frame = _frame().iloc[:2]  # a and b: every operation has a time
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_ok"] == 2 and metrics["operations_missing"] == 0 and metrics["totals_complete"] == 1
    assert metrics["total_time_ms"] == pytest.approx(2.0 * 4 + 1.0)
    assert metrics["time_per_sample_ms"] == pytest.approx(9.0 / 8)
    assert metrics["distinct_operations_time_ms"] == pytest.approx(3.0)
    assert "partial_total_time_ms" not in metrics
    # all FLOPs (4 occurrences x 4e9) over all time: the time-weighted mean, not a mean of rates
    assert metrics["gflops_per_s_mean"] == pytest.approx(16e9 / (9.0 * 1e6))
    assert metrics["gflops_per_s_median"] == pytest.approx(4e9 / 2e6)
    assert "median_ms" not in metrics and "gflops_per_s" not in metrics


@pytest.mark.parametrize("status", ["failed", "unsupported"])
def test_an_operation_without_a_time_leaves_the_totals_na_and_names_the_partial_sum(status: str) -> None:
    frame = _frame()  # c (2 occurrences) has no time
    frame.loc[2, "status"] = status
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_missing"] == 1 and metrics["totals_complete"] == 0
    assert metrics[f"operations_{status}"] == 1
    for total in ("total_time_ms", "time_per_sample_ms", "distinct_operations_time_ms"):
        assert total not in metrics
    assert metrics["partial_total_time_ms"] == pytest.approx(2.0 * 4 + 1.0)


def test_an_operation_with_a_status_but_no_median_counts_as_missing() -> None:
    frame = _frame().iloc[:2].copy()
    frame.loc[1, "median_ms"] = float("nan")
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_missing"] == 1 and "total_time_ms" not in metrics
    assert metrics["partial_total_time_ms"] == pytest.approx(8.0)


def test_contended_operations_give_a_total_with_them_as_an_upper_bound_and_one_without() -> None:
    frame = _frame()
    frame.loc[2, ["median_ms", "status"]] = [3.0, "contended"]  # c: 3 ms, 2 occurrences, its threads waited
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_contended"] == 1 and metrics["operations_without_time"] == 0
    assert metrics["operations_missing"] == 1 and metrics["totals_complete"] == 0, "no total without a caveat"
    assert "total_time_ms" not in metrics
    assert metrics["partial_total_time_ms"] == pytest.approx(2.0 * 4 + 1.0), "without the contended one"
    assert metrics["total_time_with_contended_ms"] == pytest.approx(2.0 * 4 + 1.0 + 3.0 * 2), "an upper bound"
    assert metrics["time_per_sample_with_contended_ms"] == pytest.approx(15.0 / 8)


def test_a_sweep_with_every_operation_contended_still_has_its_total_as_an_upper_bound() -> None:
    from dlbench.analysis.report import total_line

    frame = _frame()
    frame.loc[2, "median_ms"] = 3.0
    frame["status"] = "contended"
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_contended"] == 3 and metrics["operations_without_time"] == 0
    assert "partial_total_time_ms" not in metrics and "total_time_ms" not in metrics, "no sum of nothing"
    assert metrics["total_time_with_contended_ms"] == pytest.approx(2.0 * 4 + 1.0 + 3.0 * 2)
    line = total_line(metrics, 8)
    assert "15 ms" in line and "upper bound" in line and "3 contended" in line
    assert "without a time" not in line, "every operation has a time: the table shows them"


def test_the_total_line_counts_operations_without_a_time_apart_from_contended_ones() -> None:
    from dlbench.analysis.report import total_line

    frame = _frame()  # c failed: no time
    frame.loc[1, "status"] = "contended"
    metrics = summary_metrics(frame, batch_size=8)
    assert metrics["operations_without_time"] == 1 and metrics["operations_missing"] == 2
    line = total_line(metrics, 8)
    assert "1 operation(s) without a time" in line and "1 contended" in line
    assert "8 ms" in line and "9 ms" in line  # a alone; a and the contended b (an upper bound)


def test_every_status_a_row_has_is_counted() -> None:
    frame = _frame()
    frame.loc[1, "status"] = "unstable"
    metrics = summary_metrics(frame)
    assert metrics["operations_unstable"] == 1 and metrics["operations_ok"] == 1


def test_per_operation_metrics_are_keyed_by_name_and_capped_costliest_first() -> None:
    frame = _frame()
    metrics, note = operation_metrics(frame, limit=10)
    assert metrics == {"op/a/median_ms": 2.0, "op/a/gflops_per_s": pytest.approx(2000.0), "op/b/median_ms": 1.0}
    assert note == "all 2 measured operations"
    capped, note = operation_metrics(frame, limit=1)
    assert set(capped) == {"op/a/median_ms", "op/a/gflops_per_s"}, "a costs 8 ms (4 x 2), b 1 ms"
    assert "1 costliest of 2" in note and "results.csv" in note
    assert operation_metrics(frame, limit=0)[0] == {}


def _relu(batch_size: int) -> list[Operation]:
    register_resolvers()
    node = OmegaConf.merge(
        OmegaConf.structured(BenchmarkConfig),
        OmegaConf.load(CONF_DIR / "benchmark" / "relu.yaml"),
        {"common": {"N": batch_size}},
    )
    return operations_from_benchmark(OmegaConf.to_object(node))


def test_operation_names_do_not_change_with_the_batch_size() -> None:
    small, large = _relu(1), _relu(32)
    assert [operation_key(op) for op in small] == [operation_key(op) for op in large]
    assert [operation_key(op) for op in small][:2] == ["stem", "l1_64"]


def test_unnamed_operations_are_named_after_their_onnx_node_and_op_type() -> None:
    forward = Operation(3, "Conv", (("N", 8), ("C", 64)), nodes=("/layer1/layer1.0/conv1/Conv", "/layer2/x/Conv"))
    backward = Operation(9, "ConvBackwardData", (("N", 8), ("C", 64)), nodes=forward.nodes)
    assert operation_key(forward) == "layer1.layer1.0.conv1.Conv:Conv"
    assert operation_key(backward) == "layer1.layer1.0.conv1.Conv:ConvBackwardData"
    assert operation_key(Operation(4, "Relu", (("N", 8),))) == "Relu_4"


def test_repeated_names_get_the_operation_id() -> None:
    operations = [Operation(i, "Relu", (("N", 1),), name="same") for i in range(2)]
    frame = results_frame(operations, SweepResult({i: Measurement(i, _stats(1.0)) for i in range(2)}))
    assert frame["key"].tolist() == ["same", "same-1"]


def test_workload_digest_names_the_operations_not_who_measured_them() -> None:
    assert workload_digest(_relu(4)) == workload_digest(_relu(4))
    assert workload_digest(_relu(4)) != workload_digest(_relu(8))


def test_the_printed_summary_explains_every_status_but_ok_known_or_not(capsys) -> None:
    from dlbench.analysis.report import print_summary

    frame = pd.DataFrame({"id": [0, 1, 2, 3], "name": ["a", "b", "c", "d"], "median_ms": [1.0, 32.0, 2.0, None],
                          "status": ["ok", "contended", "throttled", "failed"]})  # fmt: skip
    print_summary(frame, "conv", "abc")
    out = capsys.readouterr().out
    assert "1 operation(s) contended, its threads waited for cores other work held" in out and ": b" in out
    assert "1 operation(s) throttled, status 'throttled': not a clean measurement: c" in out
    assert "1 operation(s) failed" in out and "operation(s) ok" not in out


def test_results_png_hatches_every_operation_not_ok_or_timed_on_a_busy_machine_and_says_why() -> None:
    from dlbench.analysis.plots import plot_results

    frame = pd.DataFrame({"name": ["a", "b", "c", "d"], "median_ms": [1.0, 2.0, 3.0, None],
                          "min_ms": [0.9, 1.8, 2.5, None], "max_ms": [1.1, 2.2, 3.5, None],
                          "gflops_per_s": [5.0, 6.0, 7.0, None], "status": ["ok", "contended", "ok", "failed"],
                          "machine_busy": [False, True, True, False]})  # fmt: skip
    figure = plot_results(frame, "conv")
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == ["a", "b [contended, machine busy]", "c [machine busy]"], "a failed row has no time to draw"
    hatches = [bar.get_hatch() for bar in figure.axes[0].patches]
    assert [bool(h) for h in hatches] == [False, True, True]
