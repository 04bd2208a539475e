"""A whole model's forward latency per engine: run :mod:`dlbench.backends.whole_model` with the operator
benchmarks' settings (threads, repetitions, the allocator) and read its samples into statistics."""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.core.process import meaningful_tail, run_command
from dlbench.core.values import TimeStats
from dlbench.operators.runner import RunSettings


@dataclass(frozen=True)
class EndToEnd:
    """Statistics per engine that ran, the reason per engine that did not, what the executable reports
    (versions, the torch nodes run per call, how far the engines' outputs differ), and its files."""

    stats: dict[str, TimeStats]
    errors: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    files: tuple[Path, ...] = ()


def measure_end_to_end(model: Path, engines: list[str], settings: RunSettings, workdir: Path) -> EndToEnd:
    """``model`` (every dimension fixed) timed end to end on ``engines``, interleaved in one process. When
    that process dies without samples (a crash, a timeout), each engine is timed alone, so one engine that
    cannot run the model never loses another's measurement; an engine that fails alone too is named with
    its reason in ``errors``."""
    together = _run_engines(model, engines, settings, workdir, model.stem)
    if together.stats or len(engines) == 1:
        return together
    alone = [_run_engines(model, [engine], settings, workdir, f"{model.stem}_{engine}") for engine in engines]
    facts: dict[str, Any] = {"separately": True, "engines": {}, "probes": {}}
    for part in alone:
        facts["engines"].update(part.facts.get("engines", {}))
        facts["probes"].update(part.facts.get("probes", {}))
    return EndToEnd(
        stats={k: v for part in alone for k, v in part.stats.items()},
        errors={k: v for part in alone for k, v in part.errors.items()},
        facts=facts,
        files=together.files + tuple(f for part in alone for f in part.files),
    )


def _run_engines(model: Path, engines: list[str], settings: RunSettings, workdir: Path, stem: str) -> EndToEnd:
    workdir.mkdir(parents=True, exist_ok=True)
    samples_path = workdir / f"{stem}_end_to_end.csv"
    facts_path, stderr_path = samples_path.with_suffix(".json"), workdir / f"{stem}_end_to_end_stderr.txt"
    samples_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "dlbench.backends.whole_model", str(model), str(samples_path), *engines]
    result = run_command(command, timeout=settings.timeout_s, env=settings.environment(), stderr_path=stderr_path)
    files = tuple(p for p in (samples_path, facts_path, stderr_path) if p.exists())
    if result.timed_out or not samples_path.exists():
        failure = result.describe_failure() or "wrote no samples"
        why = f"the end-to-end measurement {failure}: {meaningful_tail(result.stderr)}"
        return EndToEnd({}, {engine: why for engine in engines}, {}, files)
    samples: dict[str, list[float]] = {}
    with samples_path.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            samples.setdefault(row["engine"], []).append(float(row["ms"]))
    facts = json.loads(facts_path.read_text(encoding="utf-8")) if facts_path.exists() else {}
    stats = {e: TimeStats.from_samples(v, settings.target_rel_ci) for e, v in samples.items() if v}
    errors = {e: str(facts.get("engines", {}).get(e, {}).get("error", "no samples")) for e in engines if e not in stats}
    return EndToEnd(stats, errors, facts, files)


@dataclass(frozen=True)
class SessionNodes:
    """The nodes an onnxruntime session of the model executes, each timed alone (one row per distinct
    node: ``node, domain, op_type, count, input_shapes, median_ms, rel_ci, samples, error``), or why not."""

    rows: list[dict[str, str]]
    error: str = ""
    files: tuple[Path, ...] = ()


def measure_session_nodes(model: Path, settings: RunSettings, workdir: Path) -> SessionNodes:
    """The optimized graph of ``model``'s onnxruntime session, node by node
    (:mod:`dlbench.backends.onnxruntime.optimized`), with the operator benchmarks' settings."""
    workdir.mkdir(parents=True, exist_ok=True)
    nodes_path = workdir / f"{model.stem}_onnxruntime_session_nodes.csv"
    stderr_path = workdir / f"{model.stem}_onnxruntime_session_nodes_stderr.txt"
    nodes_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "dlbench.backends.onnxruntime.optimized", str(model), str(nodes_path)]
    result = run_command(command, timeout=settings.timeout_s, env=settings.environment(), stderr_path=stderr_path)
    files = tuple(p for p in (nodes_path, stderr_path) if p.exists())
    if result.timed_out or result.returncode != 0 or not nodes_path.exists():
        failure = result.describe_failure() or "wrote no nodes"
        return SessionNodes([], f"the session's nodes could not be timed: {failure}: {meaningful_tail(result.stderr)}",
                            files)  # fmt: skip
    with nodes_path.open(encoding="utf-8") as handle:
        return SessionNodes(list(csv.DictReader(handle)), "", files)
