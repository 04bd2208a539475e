"""An evaluation reported: its tables (per operation, per op type, the prediction's terms, where the profiled
step went, the matching), metrics, plots (predicted vs measured by op type, time breakdown, the distribution
of in-training over benchmark ratios) logged to its run, and a printed summary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlbench.analysis.plots import plot_predicted_vs_measured, plot_ratio_distribution, plot_time_breakdown
from dlbench.analysis.predict import (
    measured,
    not_predicted_frame,
    not_predicted_notes,
    op_type_frame,
    time_breakdown,
)
from dlbench.analysis.ran_as import EMULATED
from dlbench.analysis.report import NOTE_TAG
from dlbench.analysis.step_interval import error_text, interval_note
from dlbench.operators.reference import DRIFT_LIMIT_PCT


@dataclass(frozen=True)
class Evaluation:
    """Everything an evaluation computed: ``frame`` per operation, ``terms`` of the prediction, ``matched``
    (the profile matching), run-level ``metrics``, the profiled step's time and notes on what was adjusted."""

    frame: pd.DataFrame
    terms: pd.DataFrame
    matched: Any
    metrics: dict[str, float]
    profiled_ms: float
    notes: tuple[str, ...] = ()
    #: the operations far from their benchmark (:mod:`dlbench.analysis.outliers`) and the lines that name them
    #: and their causes, printed and in the run's description
    outliers: pd.DataFrame | None = None
    findings: tuple[str, ...] = ()
    #: each round's measured and predicted step (:class:`dlbench.analysis.step_interval.StepRounds`)
    rounds: pd.DataFrame | None = None

    @property
    def per_type(self) -> pd.DataFrame:
        return op_type_frame(self.frame)

    @property
    def unmeasured(self) -> pd.DataFrame:
        return self.frame[~measured(self.frame)]

    @property
    def uncovered_op_types(self) -> list[str]:
        return sorted(set(self.unmeasured["op_type"]))


def log_evaluation(run: Any, evaluation: Evaluation, backend: str, title: str) -> None:
    """Metrics, tables, notes and plots of ``evaluation`` on ``run``."""
    import matplotlib.pyplot as plt

    frame, metrics = evaluation.frame, evaluation.metrics
    breakdown = time_breakdown(frame, evaluation.matched, evaluation.profiled_ms)
    run.log_metrics({k: v for k, v in metrics.items() if v == v})
    run.log_table(frame, "operations.csv")
    run.log_table(evaluation.per_type, "op_types.csv")
    run.log_table(evaluation.terms, "prediction_terms.csv")
    run.log_table(breakdown, "time_breakdown.csv")
    run.log_table(evaluation.matched.rows, "profile_matching.csv")
    run.log_table(evaluation.matched.unmatched(), "unmatched_ops.csv")
    not_predicted = not_predicted_frame(frame, evaluation.matched, evaluation.profiled_ms)
    run.log_table(not_predicted, "not_predicted.csv")
    if evaluation.outliers is not None:
        run.log_table(evaluation.outliers, "outliers.csv")
    if evaluation.rounds is not None:  # each round's measurement, as a table and as metric series (step: round)
        run.log_table(evaluation.rounds, "rounds.csv")
        for column in ("measured_ms", "predicted_ms"):
            run.log_metric_series(f"step_time_{column[:-3]}_round_ms", evaluation.rounds[column],
                                  evaluation.rounds["round"])  # fmt: skip
    uncovered = evaluation.uncovered_op_types
    notes = list(evaluation.notes) + not_predicted_notes(not_predicted)
    if uncovered:
        notes.append(f"op types without a {backend} benchmark measurement (counted as 0 ms): {', '.join(uncovered)}")
    run.log_text("\n".join(notes) + "\n", "notes.txt")
    run.set_tags({"dlbench.uncovered_op_types": ",".join(uncovered), NOTE_TAG: evaluation_note(title, evaluation)})
    figures = {
        "predicted_vs_measured.png": plot_predicted_vs_measured(evaluation.per_type, title, evaluation.profiled_ms),
        "time_breakdown.png": plot_time_breakdown(
            breakdown, title, metrics["step_time_measured_ms"], metrics["step_time_predicted_ms"]
        ),
        "ratio_distribution.png": plot_ratio_distribution(frame, title),
    }
    for name, fig in figures.items():
        run.log_figure(fig, name)
        plt.close(fig)


#: What the per-op-type figures rest on, said wherever they are shown
PROFILED_BASIS = (
    "in_training_ms and ratio_training_to_benchmark are times in the profiled step (profiler on, {profiled} ms); "
    "the headline compares the prediction with the unprofiled step ({measured} ms)"
)


def basis_line(metrics: dict[str, float]) -> str:
    return PROFILED_BASIS.format(
        profiled=_fmt(metrics.get("step_time_profiled_ms", math.nan)),
        measured=_fmt(metrics.get("step_time_measured_ms", math.nan)),
    )


def status_line(metrics: dict[str, float]) -> str:
    """The one line that says how the prediction did (against the unprofiled step, with the profiled step
    beside it), and what it leaves out."""
    line = (
        f"step time: predicted {_fmt(metrics['step_time_predicted_ms'])} ms, measured "
        f"{_fmt(metrics['step_time_measured_ms'])} ms (median unprofiled step), "
        f"error {error_text(metrics)}"
    )
    rounds = int(metrics.get("evaluation_rounds", 0) or 0)
    if rounds > 1:
        line += f" over {rounds} paired rounds"
    profiled = metrics.get("step_time_profiled_ms", math.nan)
    if isinstance(profiled, float) and math.isfinite(profiled):
        line += f"; the profiled step took {_fmt(profiled)} ms (profiler on; the op-type figures rest on it)"
    missing = int(metrics.get("operations_unmeasured", 0))
    if missing:
        line += (
            f"; {missing} operation(s) without a measurement counted as 0 ms "
            f"({_fmt(metrics.get('unmeasured_in_training_ms', math.nan))} ms of the profiled step)"
        )
    drift = metrics.get("machine_drift_pct", math.nan)
    if math.isfinite(drift) and abs(drift) > DRIFT_LIMIT_PCT:
        line += f"; the machine's speed changed {drift:+.0f}% between training and benchmarks (in the error)"
    return line


def print_evaluation(run_name: str, run_id: str, evaluation: Evaluation) -> None:
    metrics = evaluation.metrics
    with pd.option_context("display.width", 160, "display.max_rows", 100):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(f"per op type ({basis_line(metrics)}):")
        print(evaluation.per_type.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print("\nprediction terms (benchmarks and microbenchmarks, no profiler):")
        print(terms_for_people(evaluation.terms).to_string(index=False))
    print(status_line(metrics))
    if interval_note(metrics):
        print(interval_note(metrics))
    for line in evaluation.findings:
        print(line)
    if evaluation.uncovered_op_types:
        print(f"op types without a benchmark measurement: {', '.join(evaluation.uncovered_op_types)}")
    for note in evaluation.notes:  # a dtype that ran without instructions for it (dlbench.analysis.ran_as)
        if note.startswith(EMULATED):
            print(note)
    print(
        f"profiled step {_fmt(metrics['step_time_profiled_ms'])} ms: unexplained "
        f"{_fmt(metrics['unexplained_time_pct'])}% (framework {_fmt(metrics['framework_time_pct'])}%, unmatched "
        f"operators {_fmt(metrics['unmatched_operator_time_pct'])}%, outside operators "
        f"{_fmt(metrics['outside_operators_pct'])}%), uncovered {_fmt(metrics['uncovered_time_pct'])}%"
    )
    for note in not_predicted_notes(not_predicted_frame(evaluation.frame, evaluation.matched, evaluation.profiled_ms)):
        print(note)
    top = evaluation.matched.unmatched().head(5)
    if len(top):
        print(
            "costliest unmatched operators: "
            + ", ".join(f"{r.name} {r.time_us / 1e3:.3g} ms" for r in top.itertuples())
        )


def _fmt(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)


def terms_for_people(terms: pd.DataFrame) -> pd.DataFrame:
    """The prediction's terms with their times as text: a term measured as nothing (a framework cost not above
    plain dispatch) reads "too small to measure", the unmeasured operations' line "not counted"."""
    shown = terms.copy()
    texts = []
    for term, ms in zip(shown["term"], shown["ms"], strict=True):
        if term == "unmeasured operations":
            texts.append("not counted")
        elif not ms and str(term).startswith("framework"):
            texts.append("too small to measure")
        else:
            texts.append(f"{ms:.4g}")
    shown["ms"] = texts
    return shown


def evaluation_note(title: str, evaluation: Evaluation, shown_types: int = 8) -> str:
    """The run's description in markdown, leading with predicted vs measured (the unprofiled step), then the
    profiled step the per-op-type figures rest on, the prediction's terms and the costliest op types."""
    m = evaluation.metrics
    lines = [
        f"**{title}**: predicted **{_fmt(m['step_time_predicted_ms'])} ms** vs measured "
        f"**{_fmt(m['step_time_measured_ms'])} ms** per training step (median unprofiled step after the warm-up), "
        f"error {error_text(m)}",
        *([interval_note(m)] if interval_note(m) else []),
        "",
        f"- **Profiled step**: {_fmt(m.get('step_time_profiled_ms', math.nan))} ms (profiler on). The op-type "
        "table below, `op_types.csv`, the time breakdown and the ratios are times in the profiled step.",
        f"- **Unexplained** (share of the profiled step): {_fmt(m.get('unexplained_time_pct', math.nan))}%, "
        f"**uncovered**: {_fmt(m.get('uncovered_time_pct', math.nan))}%, **not predicted** (no term; "
        f"`not_predicted.csv`): {_fmt(m.get('not_predicted_time_pct', math.nan))}%",
        "",
        "| term (prediction) | ms |",
        "|---|---|",
    ]
    lines += [f"| {r.term} | {r.ms} |" for r in terms_for_people(evaluation.terms).itertuples(index=False)]
    per_type = evaluation.per_type.head(shown_types)
    lines += ["", "| op type | predicted ms (benchmarks) | ms in the profiled step | profiled / benchmark |",
              "|---|---|---|---|"]  # fmt: skip
    for r in per_type.itertuples(index=False):
        lines.append(f"| {r.op_type} | {_fmt(float(r.predicted_ms))} | {_fmt(float(r.in_training_ms))} | "
                     f"{_fmt(float(r.ratio_training_to_benchmark))} |")  # fmt: skip
    if evaluation.findings:
        lines += ["", *(f"- {line.strip()}" if line.startswith(" ") else line for line in evaluation.findings)]
    if evaluation.notes:
        lines += ["", "Notes: " + "; ".join(evaluation.notes)]
    return "\n".join(lines)
