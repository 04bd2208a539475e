"""An evaluation reported: its tables (per operation, per op type, the prediction's terms, where the profiled
step went, the matching), metrics, plots (predicted vs measured by op type, time breakdown, the distribution
of in-training over benchmark ratios) logged to its run, and a printed summary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlbench.analysis.plots import plot_predicted_vs_measured, plot_ratio_distribution, plot_time_breakdown
from dlbench.analysis.predict import measured, op_type_frame, time_breakdown
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
    uncovered = evaluation.uncovered_op_types
    notes = list(evaluation.notes)
    if uncovered:
        notes.append(f"op types without a {backend} benchmark measurement (counted as 0 ms): {', '.join(uncovered)}")
    run.log_text("\n".join(notes) + "\n", "notes.txt")
    run.set_tags({"dlbench.uncovered_op_types": ",".join(uncovered)})
    figures = {
        "predicted_vs_measured.png": plot_predicted_vs_measured(evaluation.per_type, title),
        "time_breakdown.png": plot_time_breakdown(
            breakdown, title, metrics["step_time_measured_ms"], metrics["step_time_predicted_ms"]
        ),
        "ratio_distribution.png": plot_ratio_distribution(frame, title),
    }
    for name, fig in figures.items():
        run.log_figure(fig, name)
        plt.close(fig)


def status_line(metrics: dict[str, float]) -> str:
    """The one line that says how the prediction did, and what it leaves out."""
    line = (
        f"step time: predicted {_fmt(metrics['step_time_predicted_ms'])} ms, measured "
        f"{_fmt(metrics['step_time_measured_ms'])} ms (median unprofiled step), "
        f"error {_fmt(metrics['prediction_error_pct'])}%"
    )
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
        print(evaluation.per_type.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print("\nprediction terms:")
        print(evaluation.terms.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(status_line(metrics))
    if evaluation.uncovered_op_types:
        print(f"op types without a benchmark measurement: {', '.join(evaluation.uncovered_op_types)}")
    print(
        f"profiled step {_fmt(metrics['step_time_profiled_ms'])} ms: unexplained "
        f"{_fmt(metrics['unexplained_time_pct'])}% (framework {_fmt(metrics['framework_time_pct'])}%, unmatched "
        f"operators {_fmt(metrics['unmatched_operator_time_pct'])}%, outside operators "
        f"{_fmt(metrics['outside_operators_pct'])}%), uncovered {_fmt(metrics['uncovered_time_pct'])}%"
    )
    top = evaluation.matched.unmatched().head(5)
    if len(top):
        print(
            "costliest unmatched operators: "
            + ", ".join(f"{r.name} {r.time_us / 1e3:.3g} ms" for r in top.itertuples())
        )


def _fmt(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)
