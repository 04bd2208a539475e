"""The prediction error with its interval over an evaluation's rounds: the measured step pooled over the
trainings, each benchmark round's prediction, the paired error (a slow spell that lands on both sides of a
round cancels), and the line that says when the interval is wider than the error."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from dlbench.analysis.predict import prediction_frame
from dlbench.analysis.step_interval import (
    StepRounds,
    error_text,
    interval_metrics,
    interval_note,
    pooled_step_ms,
    predicted_per_round,
)
from dlbench.core.values import Measurement, TimeStats
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.onnx.unfold import load_table as load_unfold_table
from dlbench.onnx.unfold import unfold_operations

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def batches(wall_s: list[float], profiled: tuple[int, ...] = ()) -> pd.DataFrame:
    """A training's ``batches.csv`` as the instrumentation writes it."""
    return pd.DataFrame({"step": range(len(wall_s)), "batch": range(len(wall_s)), "wall_s": wall_s,
                         "profiled": [int(i in profiled) for i in range(len(wall_s))]})  # fmt: skip


def test_the_measured_step_pools_every_rounds_steady_steps_and_keeps_each_rounds_median() -> None:
    first = batches([9.0, 0.10, 0.50, 0.12, 0.11, 0.13], profiled=(2,))  # warm-up 1; one profiled step
    second = batches([9.0, 0.20, 0.21, 0.22])
    pooled, medians, counts = pooled_step_ms([first, second], warmup=1)
    assert pooled == pytest.approx(1e3 * statistics.median([0.10, 0.12, 0.11, 0.13, 0.20, 0.21, 0.22]))
    assert medians == pytest.approx([1e3 * statistics.median([0.10, 0.12, 0.11, 0.13]), 210.0])
    assert counts == [4, 3]


def mlp_step(tmp_path: Path):
    mlp = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 5)).eval()
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(mlp, (torch.randn(3, 12),), str(path), input_names=["input"], output_names=["output"],
                      opset_version=17, dynamo=False, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)  # fmt: skip
    extraction = extract_operations(path, 3)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, 3).with_inferred_outputs(extraction.nodes)
    from dlbench.analysis.match import load_table

    return training_step(forward, unfold_operations(forward, load_unfold_table()), facts, load_table().training)


def test_each_rounds_prediction_moves_with_its_operators_and_keeps_the_terms_measured_once(tmp_path: Path) -> None:
    step = mlp_step(tmp_path)
    gemms = [op for op in step.operations if op.op_type == "Gemm"]
    measurements = {op.id: Measurement(op.id, TimeStats.from_samples([2.0])) for op in gemms}
    frame = prediction_frame(step, measurements, {}, {})
    operators = 2.0 * sum(op.count for op in gemms)
    framework = 3.0  # a term measured once (the framework's microbenchmark)
    slow = {op.id: 4.0 for op in gemms}  # round 2: every GEMM twice as slow
    missing = {gemms[0].id: 2.0}  # round 3 timed one GEMM only: the others keep their combined time
    rounds = predicted_per_round(frame, [{}, slow, missing], operators + framework, operators + framework)
    assert rounds == pytest.approx([operators + framework, 2 * operators + framework, operators + framework])
    # a GPU timeline's prediction (not the sum of the terms) is scaled by the same factor
    timeline = predicted_per_round(frame, [slow], operators + framework, 10.0)
    assert timeline == pytest.approx([10.0 * (2 * operators + framework) / (operators + framework)])


def test_a_slow_spell_on_both_sides_of_a_round_cancels_in_the_paired_error() -> None:
    machine = [1.0, 1.4, 0.9]  # the machine's speed in each round, shared by the training and the benchmarks
    rounds = StepRounds(tuple(50.0 * m for m in machine), (10, 10, 10), tuple(47.0 * m for m in machine))
    m = interval_metrics(rounds)
    assert m["prediction_error_pct"] == pytest.approx(-6.0)
    assert m["prediction_error_lo_pct"] == pytest.approx(-6.0) and m["prediction_error_hi_pct"] == pytest.approx(-6.0)
    # the steps themselves moved with the machine: their own intervals are wide and hold every round's value
    assert m["step_time_measured_lo_ms"] < 50.0 * 0.9 and m["step_time_measured_hi_ms"] > 50.0 * 1.4
    assert m["step_time_predicted_lo_ms"] < 47.0 * 0.9 and m["step_time_predicted_hi_ms"] > 47.0 * 1.4
    assert m["training_drift_pct"] == pytest.approx(-10.0) and m["evaluation_rounds"] == 3
    assert interval_note(m) == ""


def test_rounds_that_disagree_give_an_interval_wider_than_the_error_and_the_summary_says_so() -> None:
    rounds = StepRounds((50.0, 60.0, 52.0), (10, 10, 10), (53.0, 51.0, 55.0))
    m = interval_metrics(rounds)
    ratios = [53.0 / 50.0, 51.0 / 60.0, 55.0 / 52.0]
    assert m["prediction_error_pct"] == pytest.approx(100 * (statistics.geometric_mean(ratios) - 1))
    assert m["prediction_error_lo_pct"] < min(100 * (r - 1) for r in ratios) < m["prediction_error_pct"]
    assert m["prediction_error_hi_pct"] > max(100 * (r - 1) for r in ratios)
    note = interval_note(m)
    assert "wider than the error" in note and "evaluate.rounds" in note and "holds no error" in note
    # an interval that keeps clear of no error is still said to be wider than a small error it qualifies
    narrow = {"prediction_error_pct": 2.0, "prediction_error_lo_pct": 0.5, "prediction_error_hi_pct": 6.0}
    assert "wider than the error" in interval_note(narrow) and "no error" not in interval_note(narrow)
    assert interval_note({**narrow, "prediction_error_hi_pct": 3.5}) == ""
    assert error_text(m).startswith(f"{m['prediction_error_pct']:+.1f}% (95% interval ")


def test_one_round_is_todays_error_with_no_interval_and_says_so() -> None:
    m = interval_metrics(StepRounds((50.0,), (10,), (56.0,)))
    assert m["prediction_error_pct"] == pytest.approx(12.0)
    assert math.isnan(m["prediction_error_lo_pct"]) and math.isnan(m["step_time_measured_lo_ms"])
    assert math.isnan(m["training_drift_pct"])
    assert "no interval" in interval_note(m) and "no interval" in error_text(m)
