"""An inference evaluation's rounds: each engine's prediction per round moves with its operator benchmarks (the
terms measured once kept), its error is paired by round with an interval, and an engine measured once (the
served script's torch figure) keeps its own error."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest

from dlbench.analysis.inference import (
    engine_round_metrics,
    engine_rounds,
    inference_table,
    summary_frame,
    with_round_intervals,
)
from dlbench.core.values import Measurement, Operation, TimeStats

OPERATIONS = [Operation(1, "Conv", (("N", 1),), count=2), Operation(2, "Relu", (("N", 1),), count=3)]


def table() -> pd.DataFrame:
    measured = {1: Measurement(1, TimeStats.from_samples([4.0])), 2: Measurement(2, TimeStats.from_samples([1.0]))}
    return inference_table(OPERATIONS, {"torch": measured}, {"torch": {1: "torch_conv", 2: "torch_relu"}})


def test_each_rounds_prediction_scales_the_operators_and_keeps_the_overheads_measured_once() -> None:
    # operators 2 x 4 + 3 x 1 = 11 ms, plus 1 ms measured once; round 2 ran the convolution at 5 ms
    rounds = engine_rounds(table(), "torch", [{1: 4.0, 2: 1.0}, {1: 5.0}], [12.0, 15.0], 12.0, 1.0)
    assert list(rounds["predicted_ms"]) == pytest.approx([12.0, 14.0])
    assert list(rounds["error_pct"]) == pytest.approx([0.0, 100 * (14.0 / 15.0 - 1)])
    m = engine_round_metrics("torch", rounds)
    assert m["engine/torch/error_pct"] == pytest.approx(100 * (statistics.geometric_mean([1.0, 14 / 15]) - 1))
    assert m["engine/torch/error_lo_pct"] < m["engine/torch/error_pct"] < m["engine/torch/error_hi_pct"]
    assert m["engine/torch/measured_lo_ms"] < 12.0 and m["engine/torch/measured_hi_ms"] > 15.0
    assert m["engine/torch/rounds"] == 2


def test_an_engine_measured_in_no_round_has_no_paired_error_and_keeps_its_own() -> None:
    rounds = engine_rounds(table(), "torch", [{}, {}], [math.nan, math.nan], 12.0, 1.0)
    assert engine_round_metrics("torch", rounds) == {}
    summary = summary_frame(table(), {"torch": TimeStats.from_samples([10.0])}, {}, {"torch": {"x": 1.0}})
    shown = with_round_intervals(summary, {}).set_index("engine")
    assert shown.loc["torch", "error_pct"] == pytest.approx(20.0) and math.isnan(shown.loc["torch", "error_lo_pct"])
    paired = {"engine/torch/error_pct": 5.0, "engine/torch/error_lo_pct": 1.0, "engine/torch/error_hi_pct": 9.0,
              "engine/torch/rounds": 3.0}  # fmt: skip
    shown = with_round_intervals(summary, paired).set_index("engine")
    assert list(shown.loc["torch", ["error_pct", "error_lo_pct", "error_hi_pct"]]) == [5.0, 1.0, 9.0]
