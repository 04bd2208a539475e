"""Why an outlier ran far from its benchmark, checked rather than guessed: the properties its profiled aten calls'
tensors had in training (:mod:`dlbench.training.tensor_stats`) that a benchmark never poses are flagged, each
flagged call is re-timed with them beside its plain inputs (:mod:`dlbench.backends.torch.retime`), and a
cause is named only where that re-timing reproduces the slowdown."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis.outliers import profiled_operators
from dlbench.core.cores import physical_cores
from dlbench.core.outliers import OutliersConfig

#: the properties checked, what each means and its fix
FIXES = {
    "subnormal": "torch.set_flush_denormal(True) or a scaled initialisation (values kept above the dtype's "
    "normal range)",
    "strides": "pass the tensor contiguous (store the weight in the layout it is used in, or .contiguous() it once "
    "outside the step)",
    "dtype": "keep the step in the model's dtype (look for .double(), float64 buffers or numpy float64 inputs)",
    "nonfinite": "find where NaN/Inf appear (torch.autograd.set_detect_anomaly, a lower learning rate, a loss scaler)",
    "threads": "leave the step its cores: torch.set_num_threads(1) in data-loader workers (worker_init_fn) or "
    "fewer OpenMP threads in the processes beside it",
}
#: operators that take a transposed matrix as it is (BLAS's transpose flags): no copy, so no cause
BLAS_OPERATORS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::addmv", "aten::mv")
#: a fraction of a tensor's values at or below which subnormals or NaN/Inf are not flagged
MIN_FRACTION = 1e-3
#: calls re-timed per outlier: its costliest profiled aten calls
CALLS_PER_OUTLIER = 2
#: outliers whose causes are checked: the costliest slower ones (the re-timing's time stays bounded)
OUTLIERS_CHECKED = 5
CAUSE_COLUMNS = [
    "id", "operation", "aten_op", "call", "cause", "detail", "plain_ms", "with_cause_ms", "retimed_ratio",
    "outlier_ratio", "reproduced", "fix",
]  # fmt: skip


def call_key(name: str, shapes: Any) -> str:
    """The key of an aten call by name and the shapes of its tensor arguments (the profiler's ``[]`` entries for
    non-tensor arguments dropped on both sides)."""
    if isinstance(shapes, str):
        try:
            shapes = json.loads(shapes)
        except json.JSONDecodeError:
            shapes = []
    return f"{name} {json.dumps([s for s in shapes if s != []])}"


def _tensors(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict) and "tensor" in value:
        yield value["tensor"]
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def competing_threads(machine: Mapping[str, Any]) -> float:
    """Threads of the script's child processes that wanted a core during the recorded batch: runnable ones
    sampled, or (where those cannot be read) the cores their CPU time kept busy."""
    return float(machine.get("children_runnable_threads", machine.get("children_busy_cores", 0.0)))


def _blas_layout(call: Mapping[str, Any], tensor: Mapping[str, Any]) -> bool:
    """A matrix a BLAS operator reads as it is: its last two dimensions transposed (unit stride in one of them)."""
    strides, shape = tensor["strides"], tensor["shape"]
    if call.get("name") not in BLAS_OPERATORS or len(shape) < 2:
        return False
    return strides[-2] == 1 and strides[-1] >= shape[-2] or strides[-1] == 1 and strides[-2] >= shape[-1]


def flags_of(call: Mapping[str, Any], machine: Mapping[str, Any], dtype: str) -> dict[str, str]:
    """The properties of a recorded call that its benchmark did not pose, each with what was seen."""
    flags: dict[str, str] = {}
    tensors = list(_tensors([call.get("args", []), call.get("kwargs", {})]))
    for index, t in enumerate(tensors):
        where = f"input {index} {t['shape']}"
        if t.get("subnormal", 0) > MIN_FRACTION:
            flags.setdefault(
                "subnormal", f"subnormal values: {100 * t['subnormal']:.3g}% of {where}{_flushed(machine)}"
            )
        if t.get("nonfinite", 0) > MIN_FRACTION:
            flags.setdefault("nonfinite", f"NaN/Inf: {100 * t['nonfinite']:.3g}% of {where}")
        if not t.get("contiguous", True) and t.get("numel", 0) > 1 and not _blas_layout(call, t):
            layout = "channels-last" if t.get("channels_last") else "strided/transposed"
            flags.setdefault("strides", f"{layout} {where}, strides {t['strides']}")
        if t["dtype"].startswith(("float", "bfloat")) and t["dtype"] != dtype:
            flags.setdefault("dtype", f"{t['dtype']} {where} (benchmarked in {dtype})")
    threads, cores = int(machine.get("torch_threads", 0)), physical_cores_of(machine)
    busy = competing_threads(machine)
    if cores and threads + busy > cores + 0.25:
        flags["threads"] = (
            f"{threads} step thread(s) and {busy:.2g} runnable thread(s) of the script's child processes on "
            f"{cores} physical core(s)"
        )
    return flags


def physical_cores_of(machine: Mapping[str, Any]) -> int:
    """The physical cores the step had (a record before ``physical_cores`` named its logical CPUs ``cores``)."""
    return int(machine.get("physical_cores", machine.get("cores", 0)))


def _flushed(machine: Mapping[str, Any]) -> str:
    """Whether the step ran with subnormals flushed to zero, as the subnormal cause says it (the re-timing
    runs with the same setting); nothing where the record does not say."""
    if "flush_denormal" not in machine:
        return ""
    if machine["flush_denormal"]:
        return "; the step flushed them to zero (torch.set_flush_denormal(True) was on), and so does the re-timing"
    return "; the step did not flush them (torch.set_flush_denormal was off)"


def retime_items(
    outliers: pd.DataFrame, match: Any, calls: Sequence[Mapping[str, Any]], machine: Mapping[str, Any], dtype: str
) -> list[dict[str, Any]]:
    """The re-timing spec's items: per slower outlier, its costliest profiled calls that have flags, with a
    variant per flag, ``plain`` and ``recorded`` (all flags at once); each in the dtype the call was recorded
    in (:func:`recorded_dtype`; ``dtype``, the sweep's, where it has none), as its operation is benchmarked."""
    recorded = {call_key(c["name"], c["shapes"]): c for c in calls}
    operators = profiled_operators(match)
    items = []
    for row in outliers[outliers["direction"] == "slower"].head(OUTLIERS_CHECKED).itertuples(index=False):
        for name, shapes, _ in operators.get(int(row.id), [])[:CALLS_PER_OUTLIER]:
            call = recorded.get(call_key(name, shapes))
            ran_in = recorded_dtype(call, dtype) if call is not None else dtype
            flags = flags_of(call, machine, ran_in) if call is not None else {}
            if not flags:
                continue
            variants = ["plain", *flags] + (["recorded"] if len(flags) > 1 else [])
            items.append({
                "key": f"{call_key(name, shapes)} {sorted(flags)}", "call_key": call_key(name, shapes),
                "id": int(row.id), "aten_op": name, "call": call, "dtype": ran_in,
                "flags": list(flags), "details": flags, "variants": variants,
                "threads": int(machine.get("torch_threads", 1)),
                "competitors": competing_threads(machine),
                "flush_denormal": bool(machine.get("flush_denormal", False)),
            })  # fmt: skip
    return items


def recorded_dtype(call: Mapping[str, Any], default: str) -> str:
    """The dtype a recorded call computed in, read as :func:`dlbench.analysis.ran_as.call_dtype` reads a
    profiled call (its first floating input that is not 0-dim): the dtype its operation is benchmarked in, so
    the plain re-timing runs in it (bfloat16 for a GEMM autocast ran in bfloat16); ``default`` (the sweep's)
    where it has no floating tensor."""
    from dlbench.analysis.ran_as import call_dtype

    tensors = list(_tensors([call.get("args", []), call.get("kwargs", {})]))
    return call_dtype([t.get("shape") for t in tensors], [t.get("dtype", "") for t in tensors]) or default


def unrecorded(outliers: pd.DataFrame, match: Any, calls: Sequence[Mapping[str, Any]]) -> dict[int, list[str]]:
    """Per slower outlier none of whose costliest profiled calls is in the record (a folded range such as the
    optimizer's step, a call whose shapes read differently): those calls' names. Its inputs are not checked."""
    recorded = {call_key(c["name"], c["shapes"]) for c in calls}
    operators = profiled_operators(match)
    out = {}
    for op_id in outliers[outliers["direction"] == "slower"]["id"]:
        top = operators.get(int(op_id), [])[:CALLS_PER_OUTLIER]
        if not any(call_key(name, shapes) in recorded for name, shapes, _ in top):
            out[int(op_id)] = [name for name, _, _ in top]
    return out


def reproduces(retimed_ratio: float, outlier_ratio: float, band: OutliersConfig) -> bool:
    """A re-timing reproduces an outlier's slowdown when the property alone makes the call slower by at least
    three quarters of the outlier's ratio, or by more than the band's ``high`` (then it puts the call outside
    the band by itself); never below 1.25x (the noise of a loaded machine)."""
    if not math.isfinite(retimed_ratio):
        return False
    return retimed_ratio >= max(1.25, min(band.high, 0.75 * outlier_ratio))


def interpret(
    items: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], outliers: pd.DataFrame,
    band: OutliersConfig,
) -> pd.DataFrame:  # fmt: skip
    """One row per re-timed (outlier, call, property): plain and with-property times and whether it reproduces."""
    timed = {r["key"]: r for r in results}
    by_id = outliers.set_index("id")
    rows = []
    for item in items:
        result = timed.get(item["key"], {})
        ms = result.get("ms", {})
        outlier = by_id.loc[item["id"]]
        plain, outlier_ratio = float(ms.get("plain", math.nan)), float(outlier["ratio"])
        for flag in item["flags"]:
            with_cause = float(ms.get(flag, math.nan))
            ratio = with_cause / plain if plain > 0 else math.nan
            rows.append({
                "id": item["id"], "operation": f"{outlier['op_type']} {outlier['pass']} {outlier['name']}",
                "aten_op": item["aten_op"], "call": item["call_key"], "cause": flag,
                "detail": item["details"][flag] + (f" (not re-timed: {result['error']})" if "error" in result else ""),
                "plain_ms": plain, "with_cause_ms": with_cause, "retimed_ratio": ratio,
                "outlier_ratio": outlier_ratio, "reproduced": reproduces(ratio, outlier_ratio, band),
                "fix": FIXES[flag],
            })  # fmt: skip
    return pd.DataFrame(rows, columns=CAUSE_COLUMNS)


def cause_lines(
    causes: pd.DataFrame, outliers: pd.DataFrame, not_recorded: Mapping[int, Sequence[str]] | None = None
) -> dict[int, list[str]]:
    """Per slower outlier: each reproduced cause with its re-timing and fix, each flagged property that did not
    reproduce as checked, that its inputs were as benchmarked, or (``not_recorded``) that they were not seen."""
    lines: dict[int, list[str]] = {}
    for rank, row in enumerate(outliers[outliers["direction"] == "slower"].itertuples(index=False)):
        mine = causes[causes["id"] == row.id] if len(causes) else causes
        found = lines.setdefault(int(row.id), [])
        if rank >= OUTLIERS_CHECKED:
            found.append(f"causes not checked: only the {OUTLIERS_CHECKED} costliest slower outliers are re-timed")
        elif int(row.id) in (not_recorded or {}):
            calls = ", ".join(not_recorded[int(row.id)]) or "none profiled"  # type: ignore[index]
            found.append(f"causes not checked: its calls ({calls}) are not among the recorded aten calls")
        elif mine.empty:
            found.append("no known cause: its inputs were as benchmarked (dtype, layout, values, free cores)")
        shown = mine.sort_values("reproduced", ascending=False, kind="stable").drop_duplicates("cause")
        for c in shown.itertuples(index=False):  # each cause once: on its costliest call
            timing = f"{c.aten_op} re-timed with it: {c.with_cause_ms:.3g} ms vs {c.plain_ms:.3g} ms plain"
            if c.reproduced:
                found.append(f"cause: {c.detail}; {timing}; fix: {c.fix}")
            else:
                found.append(f"checked, not reproduced here: {c.detail}; {timing}")
    return lines


def with_causes_ms(
    causes: pd.DataFrame, results: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]]
) -> float | None:
    """What the reproduced causes add to the step: per re-timed call with a reproduced cause, its re-timed time
    with its properties (all recorded ones when several were timed together) less its plain time, times its
    calls in the step; None when no cause reproduced or no such call has finite times. A call's causes are
    its own (by its key, the operator and its shapes): another call of the same operator lends it none."""
    if causes.empty or not causes["reproduced"].any():
        return None
    timed = {r["key"]: r.get("ms", {}) for r in results}
    reproduced = causes[causes["reproduced"].astype(bool)]
    extra: dict[str, float] = {}  # by call: two outliers that share a profiled call add its time once
    for item in items:
        mine = reproduced[(reproduced["id"] == item["id"]) & (reproduced["call"] == item["call_key"])]
        slowdown = _slowdown_ms(timed.get(item["key"], {}), list(mine["cause"]))
        if slowdown is not None:
            extra[item["call_key"]] = slowdown * int(item["call"].get("calls", 1))
    return sum(extra.values()) if extra else None


def _finite_ms(ms: Mapping[str, Any], variant: str) -> float | None:
    value = ms.get(variant)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _slowdown_ms(ms: Mapping[str, Any], reproduced: Sequence[str]) -> float | None:
    """One call's re-timed time with its reproduced causes less its plain time (never below 0): the ``recorded``
    variant (every property at once) where it was timed, else the slowest reproduced cause; None without a
    finite plain time or any finite time with a cause."""
    plain = _finite_ms(ms, "plain")
    with_causes = [v for v in (_finite_ms(ms, c) for c in reproduced) if v is not None]
    slowest = _finite_ms(ms, "recorded") or max(with_causes, default=None)
    if not reproduced or plain is None or slowest is None:
        return None
    return max(slowest - plain, 0.0)


@dataclass(frozen=True)
class CauseCheck:
    """How the causes are checked: the sweep's dtype (a recorded call is re-timed in its own, this where it has
    no floating tensor) and the benchmarks' threads (the plain re-timing's), where the
    re-timing's files go, its timeout, and the device whose profile times the outliers are read from."""

    dtype: str
    threads: int
    workdir: Path
    timeout: float
    device: str = "cpu"

    @property
    def time_column(self) -> str:
        return "self_device_us" if self.device == "cuda" else "self_cpu_us"


def explain_outliers(
    outliers: pd.DataFrame, match: Any, profile_dir: Path, band: OutliersConfig, check: CauseCheck
) -> tuple[pd.DataFrame, dict[int, list[str]], dict[str, float]]:
    """The causes of ``outliers`` (:func:`interpret`), the findings' lines per outlier, and metrics: the causes
    reproduced, the re-timing's wall seconds, and what the causes add to the step (``causes_extra_ms``)."""
    from dlbench.backends.torch.retime import retime_calls
    from dlbench.training.tensor_stats import read_stats

    machine, calls = read_stats(profile_dir)
    if not calls:
        note = "causes not checked: the step's tensors were not recorded (profile.warmup=0, or the script failed)"
        return pd.DataFrame(columns=CAUSE_COLUMNS), {int(i): [note] for i in outliers["id"]}, {}
    items = retime_items(outliers, match, calls, machine, check.dtype)
    start = time.perf_counter()
    results = retime_calls(items, check.workdir, check.threads, check.dtype, check.timeout) if items else []
    metrics = {"causes_retime_s": time.perf_counter() - start}
    causes = interpret(items, results, outliers, band)
    with_causes = with_causes_ms(causes, results, items)
    metrics["outlier_causes_reproduced"] = float(causes["reproduced"].sum()) if len(causes) else 0.0
    if with_causes is not None:
        metrics["causes_extra_ms"] = with_causes
    return causes, cause_lines(causes, outliers, unrecorded(outliers, match, calls)), metrics


def outlier_findings(
    frame: pd.DataFrame, match: Any, metrics: dict[str, float], band: OutliersConfig, profile_dir: Path,
    check: CauseCheck,
) -> tuple[pd.DataFrame, pd.DataFrame, list[str], dict[str, float]]:  # fmt: skip
    """The evaluation's outliers (:func:`~dlbench.analysis.outliers.find_outliers`), their causes when
    ``band.causes`` (``check``: dtype, threads, workdir and timeout of the re-timing), the findings' lines, and
    the metrics: outliers, ``predicted_step_ms`` (as benchmarked) and, when a cause reproduced,
    ``predicted_step_with_causes_ms`` (what this script does)."""
    from dlbench.analysis.outliers import batch_spread, find_outliers, outlier_lines
    from dlbench.analysis.step_run import batch_profiles
    from dlbench.training.tensor_stats import read_stats

    spread = batch_spread(batch_profiles(profile_dir, check.time_column)[0], check.time_column)
    found = find_outliers(frame, match, metrics.get("step_time_profiled_ms", math.nan), band, spread)
    predicted = metrics["step_time_predicted_ms"]
    out = {"outliers": float(len(found)), "predicted_step_ms": predicted}
    recorded_batch_s = float(read_stats(profile_dir)[0].get("batch_wall_s", math.nan))
    if math.isfinite(recorded_batch_s):  # the last warm-up batch, tensors recorded: what recording them cost
        out["tensor_stats_batch_ms"] = recorded_batch_s * 1e3
    causes, details, tail = pd.DataFrame(columns=CAUSE_COLUMNS), {}, []
    if band.causes and (found["direction"] == "slower").any():
        causes, details, cause_metrics = explain_outliers(found, match, profile_dir, band, check)
        extra = cause_metrics.pop("causes_extra_ms", None)
        out.update(cause_metrics)
        if extra is not None:
            out["predicted_step_with_causes_ms"] = predicted + extra
            tail.append(
                f"the step as benchmarked: {predicted:.4g} ms; with the reproduced causes: {predicted + extra:.4g} ms "
                f"(measured {metrics.get('step_time_measured_ms', math.nan):.4g} ms; outlier_causes.csv)"
            )
    return found, causes, outlier_lines(found, band, details=details) + busy_machine_lines(found, metrics) + tail, out


def busy_machine_lines(
    outliers: pd.DataFrame, metrics: Mapping[str, float], cpus: int | None = None, cores: int | None = None
) -> list[str]:
    """A warning when outliers were found on a machine whose load average at the start of the evaluation
    exceeded its logical CPUs (``cpus``; the load average counts runnable threads over all of them): other
    processes slow every operation of a profiled step, which no input explains. ``cores``: the physical cores
    among the CPUs this process may use (:mod:`dlbench.core.cores`), named where they differ."""
    cpus = cpus or os.cpu_count() or 1
    cores = cores or physical_cores()
    load = float(metrics.get("load_average_start", 0.0))
    if outliers.empty or load <= cpus:
        return []
    covered = float(metrics.get("covered_ratio_training_to_benchmark", math.nan))
    alike = (
        f"; the step's benchmarked operations ran {covered:.3g}x their benchmarks overall" if covered == covered else ""
    )
    where = f"{cpus} logical CPUs" + (f", {cores} physical cores" if cores != cpus else "")
    return [
        f"the machine was busy (load average {load:.3g} on {where} at the start){alike}: outliers without a "
        "cause of their own may be the machine's; evaluate again on a quiet machine"
    ]
