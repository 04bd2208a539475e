"""A network's training step as operations (forward, backward, loss, optimizer) and its step time predicted
from operator benchmarks, set against the time each operation took in the profiled training."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlbench.analysis.results import MEASURED_STATUSES
from dlbench.core.values import Measurement
from dlbench.onnx.step import OPTIMIZER_PASS, TrainingStep

# ------------------------------------------------------------------------------------------ prediction


def prediction_frame(
    step: TrainingStep,
    measurements: Mapping[int, Measurement],
    implementations: Mapping[int, str],
    in_training_us: Mapping[int, float],
) -> pd.DataFrame:
    """One row per operation: parameters, occurrences, benchmark time per call and per step, in-training
    time per step, their ratio (in training / benchmark), and why there is no benchmark time."""
    from dlbench.onnx.opdb import format_params

    rows = []
    for op in step.operations:
        m = measurements.get(op.id)
        bench_ms = m.stats.median_ms if m is not None and m.ok and m.stats is not None else math.nan
        predicted = bench_ms * op.count if not math.isnan(bench_ms) else math.nan
        in_training = in_training_us.get(op.id, 0.0) / 1e3
        status = "no benchmark" if m is None else m.status  # ok, unstable (measured), unsupported, failed
        rows.append(
            {
                "id": op.id,
                "op_type": op.op_type,
                "pass": step.pass_of(op.id),
                "name": op.label,
                "params": format_params(op.params),
                "occurrences": op.count,
                "implementation": implementations.get(op.id, ""),
                "benchmark_ms": bench_ms,
                "predicted_ms": predicted,
                "in_training_ms": in_training,
                "ratio_training_to_benchmark": in_training / predicted if predicted and predicted > 0 else math.nan,
                "flops": op.flops,
                "status": status,
                "error": (m.error if m is not None else "no registry benchmark serves this op_type"),
                "nodes": ";".join(op.nodes),
            }
        )
    return pd.DataFrame(rows)


def measured(frame: pd.DataFrame) -> pd.Series:
    """Rows with a benchmark time: ``ok``, and ``unstable`` (measured, not to the target precision)."""
    return frame["status"].isin(MEASURED_STATUSES)


def op_type_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Per op_type: operations, occurrences, predicted and in-training time per step, ratio, coverage."""
    grouped = frame.groupby("op_type", sort=False)
    out = grouped.agg(
        operations=("id", "count"),
        occurrences=("occurrences", "sum"),
        predicted_ms=("predicted_ms", lambda s: float(s.fillna(0).sum())),
        in_training_ms=("in_training_ms", "sum"),
        benchmarked=("status", lambda s: int(s.isin(MEASURED_STATUSES).sum())),
    ).reset_index()
    out["ratio_training_to_benchmark"] = out["in_training_ms"] / out["predicted_ms"].where(out["predicted_ms"] > 0)
    out["covered"] = out["benchmarked"] == out["operations"]
    return out.sort_values("in_training_ms", ascending=False, ignore_index=True)


def steady_steps_s(batches: pd.DataFrame, warmup: int) -> pd.Series:
    """Wall seconds of the unprofiled steps after the warm-up, from ``batches.csv``."""
    return batches[(batches["profiled"] == 0) & (batches["step"] >= warmup)]["wall_s"]


def measured_step_ms(batches: pd.DataFrame, warmup: int) -> tuple[float, float, int]:
    """(median unprofiled step after the warm-up, median profiled step) in ms from ``batches.csv``, and how
    many unprofiled steps after the warm-up there were.

    Profiled steps are slower (the profiler costs microseconds per operator call), so the step time the
    prediction is compared with is that of the unprofiled steps after the warm-up; warm-up steps never count."""
    steady = steady_steps_s(batches, warmup)
    profiled = batches[batches["profiled"] == 1]
    steady_ms = float(steady.median()) * 1e3 if len(steady) else math.nan
    profiled_ms = float(profiled["wall_s"].median()) * 1e3 if len(profiled) else math.nan
    return steady_ms, profiled_ms, len(steady)


#: The operator terms of a prediction, by pass group, with what each sums.
OPERATOR_TERMS = {
    "forward": "operators: forward passes (benchmark median x occurrences)",
    "backward": "operators: backward passes (unfolded gradient problems)",
    # the loss and optimizer as the script ran them (dlbench.onnx.update)
    "loss": "loss: forward and backward of each loss the profile shows, at its shape",
    "optimizer": "optimizer: each optimizer's step as it ran, with zero_grad in place and gradient clipping",
    # mixed precision as the script ran it (dlbench.analysis.casts)
    "mixed_precision": "mixed precision: autocast's casts and GradScaler's unscale and scale update, as profiled",
    # the copies between memory formats the step made (dlbench.analysis.casts)
    "layout": "layout conversions: each copy between contiguous and channels_last the step made, as profiled",
}
#: The passes of the mixed-precision term (``dlbench.analysis.casts``: CAST_PASS, SCALER_PASS).
MIXED_PRECISION_PASSES = ("autocast", "grad_scaler")
#: the pass of a layout conversion (a copy within one dtype between memory formats)
LAYOUT_PASS = "layout"


@dataclass(frozen=True)
class ExtraTerm:
    """A term not made of operations: an effect measured by its own microbenchmark and applied the same way
    to every model (e.g. the framework's per-operator dispatch cost times the graph's operator count)."""

    name: str
    ms: float
    source: str


#: One-element operators per benchmark call of the framework microbenchmark (its time is per this many).
FRAMEWORK_OPS = 64
#: FrameworkOverhead modes: plain dispatch, dispatch with autograd recording, autograd engine per node.
FRAMEWORK_MODES = {"dispatch": 0, "recording": 1, "engine": 2}


def framework_terms(autograd_nodes: int, layout_nodes: int, per_op_ms: Mapping[str, float]) -> list[ExtraTerm]:
    """The framework's cost beyond the operator benchmarks, from its microbenchmark (``per_op_ms`` by mode, ms
    per one-element operator) and the graph's counts: each autograd-recorded node records a graph node in the
    forward pass and runs through the autograd engine in the backward pass; each layout-only node (a view,
    no elements moved, so no operator benchmark) still costs one dispatch. The operator benchmarks already
    hold each operator's plain dispatch, so for them only what autograd adds counts here."""
    base = per_op_ms.get("dispatch")
    if base is None:
        return []
    terms = []
    if layout_nodes:
        terms.append(
            ExtraTerm(
                "framework: layout-only operators",
                layout_nodes * base,
                f"dispatch of views and reshapes: {layout_nodes} nodes x {1e3 * base:.3g} us (FrameworkOverhead "
                "mode 0, one-element operators)",
            )
        )
    if not autograd_nodes:
        return terms
    for mode, what in (("recording", "autograd recording in the forward pass"),
                       ("engine", "autograd engine in the backward pass")):  # fmt: skip
        if mode in per_op_ms:
            extra = max(per_op_ms[mode] - base, 0.0)
            # not above plain dispatch: too small for the microbenchmark to tell apart, not a measured zero
            per_node = f"{1e3 * extra:.3g} us" if extra > 0 else "too small to measure"
            terms.append(
                ExtraTerm(
                    f"framework: {mode}",
                    autograd_nodes * extra,
                    f"{what}: {autograd_nodes} nodes x {per_node} (FrameworkOverhead mode "
                    f"{FRAMEWORK_MODES[mode]} minus plain dispatch, one-element operators)",
                )
            )
    return terms


def prediction_terms(frame: pd.DataFrame, extra: Sequence[ExtraTerm] = ()) -> pd.DataFrame:
    """The prediction as named lines that add up to it: operator benchmarks by pass group, each extra term,
    and a line counting operations without a measurement (0 ms: the prediction leaves them out)."""
    groups = frame.assign(group=frame["pass"].map(_pass_group))
    rows = []
    for group, source in OPERATOR_TERMS.items():
        part = groups[groups["group"] == group]
        rows.append({"term": group, "ms": float(part["predicted_ms"].fillna(0).sum()),
                     "operations": int(measured(part).sum()), "source": source})  # fmt: skip
    for term in extra:
        rows.append({"term": term.name, "ms": float(term.ms), "operations": 0, "source": term.source})
    missing = frame[~measured(frame)]
    rows.append({"term": "unmeasured operations", "ms": 0.0, "operations": len(missing),
                 "source": "no benchmark measured them; counted as 0 ms"})  # fmt: skip
    return pd.DataFrame(rows, columns=["term", "ms", "operations", "source"])


def prediction_metrics(
    frame: pd.DataFrame,
    match: Any,
    measured_ms: float,
    profiled_ms: float,
    terms: pd.DataFrame | None = None,
    predicted_ms: float | None = None,
) -> dict[str, float]:
    """Run-level figures. Shares are of the profiled step's wall time (``profiled_ms``):

    - ``unexplained_time_pct``: time no operation explains (framework, unmatched operators, outside
      any operator);
    - ``uncovered_time_pct``: time of operations that have no benchmark measurement;
    - ``not_predicted_time_pct``: time the prediction has no term for: those operations, and calls of passes
      the training step does not have (``not_predicted_passes_time_pct``), see :func:`not_predicted_frame`.

    ``predicted_ms``: the step as the GPU timeline (:mod:`dlbench.analysis.timeline`) has it, where host
    and device overlap; the sum of ``terms`` otherwise.
    """
    terms = prediction_terms(frame) if terms is None else terms
    predicted = float(terms["ms"].sum()) if predicted_ms is None else float(predicted_ms)
    assigned = float(frame["in_training_ms"].sum())
    ok = measured(frame)
    covered = float(frame.loc[ok, "in_training_ms"].sum())
    operator_ms = match.total_us() / 1e3
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) and profiled_ms > 0 else operator_ms
    metrics = {
        "step_time_predicted_ms": predicted,
        "step_time_measured_ms": measured_ms,
        "step_time_profiled_ms": profiled_ms,
        "profile_operator_time_ms": operator_ms,
        "prediction_error_pct": 100.0 * (predicted - measured_ms) / measured_ms if measured_ms else math.nan,
        "unexplained_time_pct": 100.0 * max(base - assigned, 0.0) / base if base else math.nan,
        "uncovered_time_pct": 100.0 * _nonnegative(assigned - covered) / base if base else math.nan,
        "framework_time_pct": 100.0 * match.total_us("framework") / 1e3 / base if base else math.nan,
        "unmatched_operator_time_pct": 100.0 * match.total_us("unmatched") / 1e3 / base if base else math.nan,
        "outside_operators_pct": 100.0 * max(base - operator_ms, 0.0) / base if base else math.nan,
        "in_training_covered_ms": covered,
        "operations": float(len(frame)),
        "operations_benchmarked": float(ok.sum()),
        "operations_unmeasured": float((~ok).sum()),
        "unmeasured_in_training_ms": float(frame.loc[~ok, "in_training_ms"].sum()),
        **{f"predicted_ms.{_metric_key(r.term)}": float(r.ms) for r in terms.itertuples() if r.ms},
    }
    not_predicted = not_predicted_frame(frame, match, profiled_ms)
    metrics["not_predicted_time_pct"] = float(not_predicted["share_pct"].sum()) if len(not_predicted) else 0.0
    metrics["not_predicted_passes_time_pct"] = (
        100.0 * match.total_us("not_predicted") / 1e3 / base if base else math.nan
    )  # of which: passes the step does not have at all (the rest: operations without a measurement)
    covered_predicted = float(frame.loc[ok, "predicted_ms"].sum())
    if covered_predicted > 0:
        metrics["covered_ratio_training_to_benchmark"] = covered / covered_predicted
    return metrics


NOT_PREDICTED_COLUMNS = ["aten_op", "op_type", "pass", "ms", "share_pct", "reason"]


def not_predicted_frame(frame: pd.DataFrame, match: Any, profiled_ms: float) -> pd.DataFrame:
    """What the profiled step ran that the prediction has no term for, by profiled (aten) operator and pass,
    with its time per step and share of the profiled step: calls of a pass the training step does not have
    (``not_predicted`` in the matching) and time assigned to operations without a benchmark measurement."""
    records = []
    rows = match.rows
    for r in rows[rows["status"] == "not_predicted"].itertuples(index=False):
        op_type, _, pass_name = str(r.category).partition("/")
        records.append((r.name, op_type, pass_name, r.time_us / 1e3, r.reason))
    unmeasured = frame[~measured(frame)].set_index("id")
    for row_index, op_id, us in getattr(match, "assignments", ()):
        if op_id in unmeasured.index:
            op = unmeasured.loc[op_id]
            reason = f"no benchmark measurement ({op['status']})"
            records.append((rows.iloc[row_index]["name"], op["op_type"], op["pass"], us / 1e3, reason))
    out = pd.DataFrame(records, columns=["aten_op", "op_type", "pass", "ms", "reason"])
    out = out.groupby(["aten_op", "op_type", "pass", "reason"], sort=False, as_index=False)["ms"].sum()
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) and profiled_ms > 0 else match.total_us() / 1e3
    out["share_pct"] = 100.0 * out["ms"] / base if base else math.nan
    return out[NOT_PREDICTED_COLUMNS].sort_values("ms", ascending=False, ignore_index=True)


def not_predicted_notes(table: pd.DataFrame, shown: int = 8) -> list[str]:
    """The note naming what the prediction leaves out, costliest first, with each share of the profiled step."""
    if table.empty:
        return []
    total = float(table["share_pct"].sum())
    parts = [f"{r.aten_op} ({r.op_type} {r.pass_}) {r.share_pct:.2g}%"
             for r in table.rename(columns={"pass": "pass_"}).head(shown).itertuples(index=False)]  # fmt: skip
    more = f", and {len(table) - shown} more (not_predicted.csv)" if len(table) > shown else ""
    return [f"not predicted ({total:.3g}% of the profiled step, no benchmark term): {', '.join(parts)}{more}"]


def _metric_key(term: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in term).strip("_")


def _nonnegative(value: float) -> float:
    """A difference of sums, with float round-off below a nanosecond read as zero."""
    return value if value > 1e-6 else 0.0


def time_breakdown(frame: pd.DataFrame, match: Any, profiled_ms: float) -> pd.DataFrame:
    """Where the profiled step goes: per op_type and pass group the assigned time, then framework,
    unmatched operators and time outside any operator, each with its share of the profiled step."""
    rows = []
    group = frame.assign(part=frame["pass"].map(_pass_group))
    for (op_type, part), sub in group.groupby(["op_type", "part"], sort=False):
        rows.append({"part": f"{op_type} {part}", "kind": "operation", "ms": float(sub["in_training_ms"].sum())})
    rows.append({"part": "framework", "kind": "unexplained", "ms": match.total_us("framework") / 1e3})
    rows.append({"part": "unmatched operators", "kind": "unexplained", "ms": match.total_us("unmatched") / 1e3})
    if match.total_us("not_predicted"):
        rows.append(
            {"part": "not predicted passes", "kind": "unexplained", "ms": match.total_us("not_predicted") / 1e3}
        )
    operator_ms = match.total_us() / 1e3
    if profiled_ms and math.isfinite(profiled_ms):
        rows.append({"part": "outside operators", "kind": "unexplained", "ms": max(profiled_ms - operator_ms, 0.0)})
    out = pd.DataFrame(rows)
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) else operator_ms
    out["share_pct"] = 100.0 * out["ms"] / base if base else math.nan
    return out.sort_values("ms", ascending=False, ignore_index=True)


def _pass_group(pass_name: str) -> str:
    if pass_name == "forward":
        return "forward"
    if pass_name.startswith("loss"):
        return "loss"
    if pass_name == OPTIMIZER_PASS:
        return "optimizer"
    if pass_name == LAYOUT_PASS:
        return "layout"
    return "mixed_precision" if pass_name in MIXED_PRECISION_PASSES else "backward"
