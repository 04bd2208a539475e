"""A served model's forward latency predicted per engine from that engine's operator benchmarks (the sum of
median x count over the model's operations, eval-mode kernels) and set against the engine's end-to-end
measurement: the per-operation table, the terms by op type, the metrics and the printed summary."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dlbench.analysis.comparison import paired_ratio
from dlbench.analysis.step_interval import error_text, interval_note, level_interval, round_predictions
from dlbench.core.values import Measurement, Operation, TimeStats

#: engine -> the backend whose operator benchmarks predict it
ENGINE_BACKENDS = {"onnxruntime": "onnxruntime", "torch": "torch"}


def inference_table(
    operations: Sequence[Operation],
    measured: Mapping[str, Mapping[int, Measurement]],
    implementations: Mapping[str, Mapping[int, str]],
) -> pd.DataFrame:
    """One row per operation: its identity, and per engine the benchmark that measured it, its status,
    median and term (median x count; NA when the operation has no time there)."""
    rows = []
    for op in operations:
        row: dict[str, object] = {"id": op.id, "name": op.name, "op_type": op.op_type, "count": op.count,
                                  "params": ";".join(f"{k}={v:g}" for k, v in op.params),
                                  "nodes": " ".join(op.nodes)}  # fmt: skip
        for engine in measured:
            m = measured[engine].get(op.id)
            ok = m is not None and m.ok and m.stats is not None
            row[f"{engine}_benchmark"] = implementations[engine].get(op.id, "")
            row[f"{engine}_status"] = m.status if m is not None else "unserved"
            row[f"{engine}_median_ms"] = m.stats.median_ms if ok else float("nan")  # type: ignore[union-attr]
            row[f"{engine}_term_ms"] = m.stats.median_ms * op.count if ok else float("nan")  # type: ignore[union-attr]
            row[f"{engine}_note"] = (m.error if m is not None else "no benchmark of this engine serves it")[:200]
        rows.append(row)
    return pd.DataFrame(rows)


def overhead_terms(table: pd.DataFrame, facts: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """Per engine, what a whole model's call costs besides its operators' benchmarks, from the end-to-end
    executable's probes (measured apart from the model): each onnxruntime benchmark timed one session run
    around its node, the model's session runs once (``session_runs``: one run less per benchmarked node); the
    torch graph runs layout-only nodes (views) the benchmarks leave out (``layout_nodes``)."""
    probes = facts.get("probes", {})
    engines = facts.get("engines", {})
    assert isinstance(probes, dict) and isinstance(engines, dict)
    terms: dict[str, dict[str, float]] = {}
    if "onnxruntime_run_ms" in probes and "onnxruntime_term_ms" in table:
        runs = float(table.loc[table["onnxruntime_term_ms"].notna(), "count"].sum())
        # a benchmark's time is its run's fixed cost, the node's own dispatch and its work; a session pays
        # the fixed cost once, the dispatch per node
        fixed = float(probes["onnxruntime_run_ms"]) - float(probes.get("onnxruntime_node_ms", 0.0))
        terms["onnxruntime"] = {"session_runs": fixed * (1.0 - runs)}
    torch_nodes = engines.get("torch", {}).get("torch_nodes_per_call")
    if "torch_layout_node_ms" in probes and isinstance(torch_nodes, dict) and "torch_term_ms" in table:
        layout = max(sum(torch_nodes.values()) - float(table["count"].sum()), 0.0)
        terms["torch"] = {"layout_nodes": float(probes["torch_layout_node_ms"]) * layout}
    return terms


def engine_summary(
    table: pd.DataFrame, engine: str, measured: TimeStats | None, overheads: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Predicted (the sum of the terms and ``overheads``; ``partial_predicted_ms`` when an operation has no
    time), measured (the end-to-end median) and the error of the prediction in percent of the measured
    latency."""
    terms = table[f"{engine}_term_ms"] if not table.empty else pd.Series(dtype=float)
    missing = int(terms.isna().sum())
    total = float(terms.sum(skipna=True)) + sum((overheads or {}).values())
    summary = {"partial_predicted_ms" if missing else "predicted_ms": total, "operations_missing": float(missing)}
    if measured is not None:
        summary["measured_ms"] = measured.median_ms
        if measured.rel_ci is not None:
            summary["measured_rel_ci"] = measured.rel_ci
        if not missing and measured.median_ms > 0:
            summary["error_pct"] = 100.0 * (total - measured.median_ms) / measured.median_ms
    return summary


def terms_by_op_type(table: pd.DataFrame, engine: str) -> dict[str, float]:
    """The prediction's terms summed per op type (ms), largest first."""
    if table.empty:
        return {}
    sums = table.groupby("op_type")[f"{engine}_term_ms"].sum(min_count=1).dropna()
    return {str(k): float(v) for k, v in sums.sort_values(ascending=False).items()}


def inference_metrics(
    table: pd.DataFrame, end_to_end: Mapping[str, TimeStats], overheads: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """``engine/<engine>/<key>`` for the summary, ``engine/<engine>/term/<op_type>_ms`` for the operators'
    terms and ``engine/<engine>/overhead/<name>_ms`` for the others."""
    metrics: dict[str, float] = {}
    for engine in ENGINE_BACKENDS:
        if f"{engine}_term_ms" not in table:
            continue
        extra = overheads.get(engine, {})
        for key, value in engine_summary(table, engine, end_to_end.get(engine), extra).items():
            metrics[f"engine/{engine}/{key}"] = value
        for op_type, value in terms_by_op_type(table, engine).items():
            metrics[f"engine/{engine}/term/{op_type}_ms"] = value
        for name, value in extra.items():
            metrics[f"engine/{engine}/overhead/{name}_ms"] = value
    return metrics


def engine_problems(
    table: pd.DataFrame, benchmark_errors: Mapping[str, str], end_to_end_errors: Mapping[str, str]
) -> dict[str, str]:
    """Per engine that cannot be predicted or measured, why: its operator benchmarks failed as a whole,
    operations without a time there (how many, of which op types, the first reason), or no end-to-end
    measurement. An engine missing here was predicted completely and measured."""
    problems: dict[str, list[str]] = {}
    for engine in ENGINE_BACKENDS:
        if engine in benchmark_errors:
            problems.setdefault(engine, []).append(f"operator benchmarks failed: {benchmark_errors[engine]}")
        elif f"{engine}_term_ms" in table and not table.empty:
            missing = table[table[f"{engine}_term_ms"].isna()]
            if len(missing):
                types = ", ".join(sorted(set(missing["op_type"].astype(str))))
                first = str(missing.iloc[0][f"{engine}_note"]) or str(missing.iloc[0][f"{engine}_status"])
                problems.setdefault(engine, []).append(
                    f"{len(missing)} operations without a benchmark time ({types}; first: {first[:120]})"
                )
        if engine in end_to_end_errors:
            problems.setdefault(engine, []).append(f"not measured end to end: {end_to_end_errors[engine]}")
    return {engine: "; ".join(reasons)[:500] for engine, reasons in problems.items()}


def summary_frame(
    table: pd.DataFrame,
    end_to_end: Mapping[str, TimeStats],
    problems: Mapping[str, str],
    overheads: Mapping[str, Mapping[str, float]],
) -> pd.DataFrame:
    """One row per engine: predicted, measured, error, operations without a time, the largest terms, the
    overhead terms, and why an engine cannot be predicted or measured (:func:`engine_problems`)."""
    rows = []
    for engine in ENGINE_BACKENDS:
        if f"{engine}_term_ms" not in table:
            continue
        extra = overheads.get(engine, {})
        s = engine_summary(table, engine, end_to_end.get(engine), extra)
        top = list(terms_by_op_type(table, engine).items())[:3]
        rows.append({
            "engine": engine,
            "predicted_ms": s.get("predicted_ms", s.get("partial_predicted_ms")),
            "complete": "partial_predicted_ms" not in s,
            "measured_ms": s.get("measured_ms"),
            "error_pct": s.get("error_pct"),
            "operations_missing": int(s["operations_missing"]),
            "largest_terms": ", ".join(f"{t} {v:.3g}" for t, v in top),
            "overheads": ", ".join(f"{t} {v:+.3g}" for t, v in extra.items()),
            "unable": problems.get(engine, ""),
        })  # fmt: skip
    return pd.DataFrame(rows)


def engine_rounds(
    table: pd.DataFrame,
    engine: str,
    medians: Sequence[Mapping[int, float]],
    measured_ms: Sequence[float],
    predicted_ms: float,
    overheads_ms: float,
) -> pd.DataFrame:
    """One row per round of ``engine``: its end-to-end median that round, and its prediction with that round's
    benchmark medians (:func:`dlbench.analysis.step_interval.round_predictions`; ``predicted_ms``: the
    engine's prediction, ``overheads_ms``: its terms measured once)."""
    rows = table[table[f"{engine}_term_ms"].notna()] if f"{engine}_term_ms" in table else table.iloc[0:0]
    combined = dict(zip(rows["id"], rows[f"{engine}_median_ms"], strict=True))
    terms_ms = float(rows[f"{engine}_term_ms"].sum()) + overheads_ms
    predicted = round_predictions(combined, dict(zip(rows["id"], rows["count"], strict=True)), medians, terms_ms,
                                  predicted_ms)  # fmt: skip
    frame = pd.DataFrame({"round": range(1, len(predicted) + 1), "engine": engine,
                          "measured_ms": list(measured_ms), "predicted_ms": predicted})  # fmt: skip
    frame["error_pct"] = 100.0 * (frame["predicted_ms"] / frame["measured_ms"] - 1.0)
    return frame


def engine_round_metrics(engine: str, rounds: pd.DataFrame) -> dict[str, float]:
    """``engine/<engine>/error_pct`` paired by round with ``error_lo_pct`` / ``error_hi_pct`` (the 95% interval
    over the paired rounds, :func:`dlbench.analysis.comparison.paired_ratio`), the measured and predicted
    latencies' intervals and the rounds used; empty when no round both measured and predicted the engine."""
    paired = paired_ratio(a=rounds["measured_ms"].tolist(), b=rounds["predicted_ms"].tolist())
    if not paired.rounds:
        return {}
    err, low, high = paired.error_pct
    measured_lo, measured_hi = level_interval(rounds["measured_ms"].tolist())
    predicted_lo, predicted_hi = level_interval(rounds["predicted_ms"].tolist())
    values = {"error_pct": err, "error_lo_pct": low, "error_hi_pct": high, "measured_lo_ms": measured_lo,
              "measured_hi_ms": measured_hi, "predicted_lo_ms": predicted_lo, "predicted_hi_ms": predicted_hi,
              "rounds": float(paired.rounds)}  # fmt: skip
    return {f"engine/{engine}/{key}": value for key, value in values.items()}


def with_round_intervals(summary: pd.DataFrame, metrics: Mapping[str, float]) -> pd.DataFrame:
    """The summary's error per engine as the paired rounds give it, with its interval (NaN without one)."""
    summary = summary.copy()
    for column in ("error_pct", "error_lo_pct", "error_hi_pct"):
        values = [metrics.get(f"engine/{engine}/{column}", math.nan) for engine in summary["engine"]]
        if column == "error_pct":  # an engine without rounds (the served script's torch figure) keeps its own
            values = [v if f"engine/{e}/rounds" in metrics else old
                      for v, e, old in zip(values, summary["engine"], summary[column], strict=True)]  # fmt: skip
        summary[column] = values
    return summary


def engine_error_text(row: object) -> str:
    """An engine's error with its interval, as the summary prints it."""
    values = {key: float(getattr(row, key, math.nan)) for key in ("error_pct", "error_lo_pct", "error_hi_pct")}
    values = {key: (math.nan if pd.isna(value) else value) for key, value in values.items()}
    return error_text({f"prediction_{key}": value for key, value in values.items()})


def print_inference(model: str, batch_size: int, threads: int, summary: pd.DataFrame) -> None:
    print(f"\ninference latency of {model} at batch {batch_size}, {threads} threads (prediction: operator "
          "benchmarks' median x count, eval-mode kernels; measured: end-to-end median)")  # fmt: skip
    header = f"{'engine':12s} {'predicted_ms':>13s} {'measured_ms':>12s} {'error':>8s} {'missing':>8s}"
    print(f"{header}  largest terms (ms)")
    for row in summary.itertuples():
        predicted = f"{row.predicted_ms:.4g}" + ("" if row.complete else "*")
        measured = "NA" if pd.isna(row.measured_ms) else f"{row.measured_ms:.4g}"
        error = "NA" if pd.isna(row.error_pct) else f"{row.error_pct:+.1f}%"
        print(f"{row.engine:12s} {predicted:>13s} {measured:>12s} {error:>8s} {row.operations_missing:8d}  "
              f"{row.largest_terms}{'; ' if row.overheads else ''}{row.overheads}")  # fmt: skip
        if not pd.isna(getattr(row, "error_lo_pct", math.nan)):
            print(f"  {row.engine} error {engine_error_text(row)} over the paired rounds")
            note = interval_note({"e_pct": row.error_pct, "e_lo_pct": row.error_lo_pct,
                                  "e_hi_pct": row.error_hi_pct}, "e", f"{row.engine}'s error")  # fmt: skip
            if note:
                print(f"  {note}")
        original = getattr(row, "original_nodes_ms", float("nan"))
        if not pd.isna(original):
            error = getattr(row, "original_nodes_error_pct", float("nan"))
            print(f"  {row.engine} from its original nodes (before the session's fusions and layouts): "
                  f"{original:.4g} ms" + ("" if pd.isna(error) else f", {error:+.1f}%"))  # fmt: skip
        if row.unable:
            print(f"  {row.engine} cannot be evaluated fully: {row.unable}")
    if not summary["complete"].all():
        print("* partial: some operations have no time with that engine (see inference_operations.csv); no error")


def session_prediction(
    nodes: Sequence[Mapping[str, str]], facts: Mapping[str, object], measured: TimeStats | None
) -> dict[str, float]:
    """onnxruntime predicted as it runs: the sum of median x count over the nodes its session executes (the
    optimized graph, each node timed alone in its layout) plus the session's own per-run cost. Each node's
    one-node session paid that cost once, the model's session pays it once per call (``session_runs``,
    from the probes measured apart, as in :func:`overhead_terms`). ``partial_predicted_ms`` when a node has
    no time; ``term/<op_type>_ms`` per op type (its domain's last word first when not ONNX's own)."""
    probes = facts.get("probes", {})
    assert isinstance(probes, dict)
    timed = [row for row in nodes if row.get("median_ms")]
    runs = sum(int(row["count"]) for row in timed)
    terms: dict[str, float] = {}
    for row in timed:
        name = (row["domain"].rsplit(".", 1)[-1] + "." if row["domain"] else "") + row["op_type"]
        terms[name] = terms.get(name, 0.0) + float(row["median_ms"]) * int(row["count"])
    fixed = float(probes.get("onnxruntime_run_ms", 0.0)) - float(probes.get("onnxruntime_node_ms", 0.0))
    overhead = fixed * (1.0 - runs) if "onnxruntime_run_ms" in probes else 0.0
    total = sum(terms.values()) + overhead
    missing = len(nodes) - len(timed)
    result = {"partial_predicted_ms" if missing else "predicted_ms": total, "nodes_missing": float(missing),
              "nodes": float(runs), "overhead/session_runs_ms": overhead}  # fmt: skip
    result.update({f"term/{name}_ms": value for name, value in sorted(terms.items(), key=lambda kv: -kv[1])})
    if measured is not None and not missing and measured.median_ms > 0:
        result["error_pct"] = 100.0 * (total - measured.median_ms) / measured.median_ms
    return result


def with_session_prediction(
    metrics: Mapping[str, float], summary: pd.DataFrame, session: Mapping[str, float]
) -> tuple[dict[str, float], pd.DataFrame]:
    """The onnxruntime figures as the session runs (``engine/onnxruntime/...``) with the original-node
    prediction kept as a second figure (``engine/onnxruntime/original_nodes/...``), so the effect of the
    session's fusions and layouts is visible; the summary's onnxruntime row likewise."""
    prefix = "engine/onnxruntime/"
    moved = ("predicted_ms", "partial_predicted_ms", "error_pct", "operations_missing")
    out = {k: v for k, v in metrics.items() if not (k.startswith(prefix) and k[len(prefix) :] in moved)}
    out.update({f"{prefix}original_nodes/{k[len(prefix):]}": v for k, v in metrics.items()
                if k.startswith(prefix) and k[len(prefix):] in moved})  # fmt: skip
    out.update({f"{prefix}session/{k}" if k.startswith(("term/", "overhead/")) else prefix + k: v
                for k, v in session.items()})  # fmt: skip
    summary = summary.copy()
    rows = summary["engine"] == "onnxruntime"
    if rows.any():
        summary["original_nodes_ms"] = summary["predicted_ms"].where(rows)
        summary["original_nodes_error_pct"] = summary["error_pct"].where(rows)
        summary.loc[rows, "predicted_ms"] = session.get("predicted_ms", session.get("partial_predicted_ms"))
        summary.loc[rows, "error_pct"] = session.get("error_pct", float("nan"))
        summary.loc[rows, "complete"] = "predicted_ms" in session
        top = [(k[5:-3], v) for k, v in session.items() if k.startswith("term/")][:3]
        summary.loc[rows, "largest_terms"] = ", ".join(f"{t} {v:.3g}" for t, v in top)
        summary.loc[rows, "overheads"] = f"session_runs {session.get('overhead/session_runs_ms', 0.0):+.3g}"
    return out, summary
