"""What an evaluation says about its figures: the headline is predicted vs the unprofiled step, every
per-op-type figure says it is from the profiled step, a framework cost not above plain dispatch reads "too
small to measure" (not "0 us"), and the run's description leads with predicted vs measured."""

from __future__ import annotations

import pandas as pd

from dlbench.analysis.evaluation import Evaluation, evaluation_note, status_line, terms_for_people
from dlbench.analysis.plots import plot_predicted_vs_measured
from dlbench.analysis.predict import framework_terms, prediction_terms

METRICS = {"step_time_predicted_ms": 61.9, "step_time_measured_ms": 62.7, "step_time_profiled_ms": 168.0,
           "prediction_error_pct": -1.2, "unexplained_time_pct": 30.0, "uncovered_time_pct": 0.0}  # fmt: skip


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"id": [0, 1], "op_type": ["Conv", "Relu"], "pass": ["forward", "forward"], "occurrences": [1, 1],
         "predicted_ms": [10.0, 1.0], "in_training_ms": [100.0, 11.0], "status": ["ok", "ok"]}
    )  # fmt: skip


def test_a_framework_cost_not_above_plain_dispatch_is_too_small_to_measure_not_zero() -> None:
    terms = framework_terms(autograd_nodes=10, layout_nodes=0, per_op_ms={"dispatch": 0.002, "recording": 0.002,
                                                                          "engine": 0.005})  # fmt: skip
    recording, engine = terms
    assert recording.ms == 0.0 and "too small to measure" in recording.source and "0 us" not in recording.source
    assert "3 us" in engine.source
    shown = terms_for_people(prediction_terms(_frame(), terms)).set_index("term")["ms"]
    assert shown["framework: recording"] == "too small to measure" and shown["framework: engine"] == "0.03"
    assert shown["unmeasured operations"] == "not counted" and shown["forward"] == "11"


def test_the_headline_compares_with_the_unprofiled_step_and_names_the_profiled_one() -> None:
    line = status_line(METRICS)
    assert line.startswith("step time: predicted 61.9 ms, measured 62.7 ms (median unprofiled step)")
    assert "the profiled step took 168 ms" in line


def test_the_evaluation_description_leads_with_predicted_vs_measured_and_says_what_each_table_rests_on() -> None:
    frame = _frame()
    evaluation = Evaluation(frame, prediction_terms(frame), None, METRICS, 168.0, ("a note",))
    note = evaluation_note("mlp bs8 torch cpu", evaluation)
    first, *rest = note.splitlines()
    assert first.startswith("**mlp bs8 torch cpu**: predicted **61.9 ms** vs measured **62.7 ms** per training step")
    assert "unprofiled" in first
    assert (
        "**Profiled step**: 168 ms" in note
        and "| op type | predicted ms (benchmarks) | ms in the profiled step" in note
    )
    assert "| Conv | 10 | 100 | 10 |" in note and note.endswith("Notes: a note")


def test_the_op_type_plot_labels_its_training_bars_as_the_profiled_step() -> None:
    from dlbench.analysis.predict import op_type_frame

    figure = plot_predicted_vs_measured(op_type_frame(_frame()), "mlp", profiled_ms=168.0)
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == ["benchmarks (predicted)", "in training, profiled step (168 ms)"]
    assert "profiler on" in figure.axes[0].get_xlabel()
