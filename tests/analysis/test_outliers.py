"""Outliers: the operations whose time in training leaves their benchmark's band, costliest first."""

from __future__ import annotations

import pandas as pd
import pytest

from dlbench.analysis.match import MatchResult
from dlbench.analysis.outliers import batch_spread, find_outliers, outlier_lines
from dlbench.core.outliers import OutliersConfig


def frame_and_match(rows: list[tuple[int, str, float, float]]) -> tuple[pd.DataFrame, MatchResult]:
    """(id, op_type, predicted ms, in-training ms) per operation, each with one profiled aten row."""
    frame = pd.DataFrame(
        [{"id": i, "op_type": t, "pass": "forward", "name": f"/{t}_{i}", "benchmark_ms": p, "predicted_ms": p,
          "in_training_ms": m, "status": "ok"} for i, t, p, m in rows]
    )  # fmt: skip
    profiled = pd.DataFrame(
        [{"name": f"aten::{t.lower()}", "input_shapes": "[[4, 8]]", "calls": 1, "time_us": m * 1e3,
          "status": "matched"} for _, t, _, m in rows]
    )  # fmt: skip
    assignments = tuple((k, i, m * 1e3) for k, (i, _, _, m) in enumerate(rows))
    return frame, MatchResult(profiled, {i: m * 1e3 for i, _, _, m in rows}, assignments)


def test_operations_outside_the_band_are_named_costliest_first():
    # step 100 ms: Gemm 30 ms vs 3 (10x, costs 27 ms), Conv 20 vs 8 (2.5x, 12 ms), Relu 1.5 vs 10 (0.15x,
    # -8.5 ms), Add 5 vs 4 (1.25x: inside), Mul 0.5 vs 0.05 (10x but 0.5% of the step: too small to name)
    frame, match = frame_and_match(
        [(1, "Gemm", 3.0, 30.0), (2, "Conv", 8.0, 20.0), (3, "Relu", 10.0, 1.5), (4, "Add", 4.0, 5.0),
         (5, "Mul", 0.05, 0.5)]
    )  # fmt: skip
    found = find_outliers(frame, match, 100.0, OutliersConfig())
    assert list(found["op_type"]) == ["Gemm", "Conv", "Relu"]
    assert list(found["direction"]) == ["slower", "slower", "faster"]
    assert found["ratio"].tolist() == pytest.approx([10.0, 2.5, 0.15])
    assert found["cost_ms"].tolist() == pytest.approx([27.0, 12.0, -8.5])
    assert found["share_pct"].tolist() == pytest.approx([30.0, 20.0, 1.5])
    assert found["aten_ops"].iloc[0] == "aten::gemm"
    lines = outlier_lines(found, OutliersConfig(), shown=2)
    assert len(lines) == 3 and "3 operation(s)" in lines[0] and "the 2 costliest" in lines[0]
    assert "Gemm" in lines[1] and "10x" in lines[1] and "Conv" in lines[2]


def test_a_wider_band_and_a_higher_share_name_fewer():
    frame, match = frame_and_match([(1, "Gemm", 3.0, 30.0), (2, "Conv", 8.0, 20.0), (3, "Relu", 10.0, 1.5)])
    found = find_outliers(frame, match, 100.0, OutliersConfig(high=5.0, low=0.1, min_share_pct=25.0))
    assert list(found["op_type"]) == ["Gemm"]


def test_a_healthy_step_says_no_outliers():
    frame, match = frame_and_match([(1, "Gemm", 10.0, 12.0), (2, "Relu", 1.0, 0.8)])
    found = find_outliers(frame, match, 20.0, OutliersConfig())
    assert found.empty
    assert outlier_lines(found, OutliersConfig())[0].startswith("no outliers")


def test_operations_without_a_benchmark_are_never_outliers():
    frame, match = frame_and_match([(1, "Gemm", 3.0, 30.0)])
    frame["status"] = "unsupported"
    assert find_outliers(frame, match, 100.0, OutliersConfig()).empty


@pytest.mark.parametrize("keys", [{"high": 0.9}, {"low": 1.5}, {"low": 0.0}, {"min_share_pct": 100.0}])
def test_a_band_that_does_not_surround_one_is_refused_naming_the_key(keys):
    with pytest.raises(ValueError, match="evaluate.outliers"):
        OutliersConfig(**keys)


def test_a_slowdown_in_some_profiled_batches_only_is_the_machines_not_the_operations():
    # three profiled batches; Gemm took 30 ms in each (a cause of its own), Relu 30 ms in one batch and 3 in the
    # other two (the machine took the core away once): its median (3 ms) is in the band; Conv's median is out
    # of it (20 vs 8 ms) but one batch ran at 7 ms, inside: named only when every batch is outside
    rows = pd.DataFrame(
        [{"batch": b, "name": "aten::gemm", "input_shapes": "[[4, 8]]", "self_cpu_us": 30e3} for b in range(3)]
        + [{"batch": b, "name": "aten::conv", "input_shapes": "[[4, 8]]", "self_cpu_us": t}
           for b, t in enumerate((20e3, 7e3, 25e3))]
    )  # fmt: skip
    spread = batch_spread(rows, "self_cpu_us")
    assert spread[("aten::conv", "[[4, 8]]")] == pytest.approx((7 / 20, 25 / 20))
    frame, match = frame_and_match([(1, "Gemm", 3.0, 30.0), (2, "Conv", 8.0, 20.0)])
    assert list(find_outliers(frame, match, 100.0, OutliersConfig())["op_type"]) == ["Gemm", "Conv"]
    found = find_outliers(frame, match, 100.0, OutliersConfig(), spread)
    assert list(found["op_type"]) == ["Gemm"]
    assert found["ratio_fastest_batch"].iloc[0] == pytest.approx(10.0)
