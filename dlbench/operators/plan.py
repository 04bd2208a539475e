"""Which registered implementation measures which operation: entries of the chosen backend and device that
serve each op_type, what is unavailable here and why, and which op types nothing serves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dlbench.core.errors import ConfigurationError
from dlbench.core.values import Operation
from dlbench.onnx.extract import Extraction
from dlbench.operators.registry import OperatorBenchmark, Registry


def select_implementations(registry: Registry, op_type: str, backend: str, device: str) -> list[OperatorBenchmark]:
    """Entries of ``backend`` serving ``op_type`` on ``device``; a clear error when there is none."""
    matching = registry.serving(op_type, backend, device)
    if matching:
        return matching
    others = registry.serving(op_type)
    offered = ", ".join(f"{e.name} (backend={e.backend}, device={','.join(e.devices)})" for e in others) or "none"
    raise ConfigurationError(
        f"no {backend!r} benchmark for {op_type} on device {device!r} is registered; registered for {op_type}: "
        f"{offered}"
    )


@dataclass(frozen=True)
class BenchmarkPlan:
    """Which benchmark measures which operations, and what nothing here serves."""

    assignments: tuple[tuple[OperatorBenchmark, tuple[Operation, ...]], ...]
    unavailable: Mapping[str, str]  # benchmark name -> why it cannot run here
    unserved: Mapping[str, int]  # op_type -> ONNX nodes of it no available benchmark serves
    served_types: frozenset[str] = frozenset()  # op types an available entry serves


def plan_benchmarks(registry: Registry, operations: Sequence[Operation], backend: str, device: str) -> BenchmarkPlan:
    """Every available ``backend`` entry for ``device`` gets all operations whose op_type it serves."""
    by_entry: dict[str, list[Operation]] = {}
    entries: dict[str, OperatorBenchmark] = {}
    unavailable: dict[str, str] = {}
    unserved: Counter[str] = Counter()
    served_types: set[str] = set()
    for op in operations:
        served = False
        for entry in registry.serving(op.op_type, backend, device):
            reason = entry.unavailable_reason
            if reason:
                unavailable[entry.name] = reason
                continue
            entries[entry.name] = entry
            by_entry.setdefault(entry.name, []).append(op)
            served = True
            served_types.add(op.op_type)
        if not served:
            unserved[op.op_type] += len(op.nodes) if op.nodes else op.count
    return BenchmarkPlan(
        assignments=tuple((entries[name], tuple(ops)) for name, ops in by_entry.items()),
        unavailable=unavailable,
        unserved=dict(unserved.most_common()),
        served_types=frozenset(served_types),
    )


COVERAGE_COLUMNS = [
    "op_type", "nodes", "constant", "layout", "served", "unserved", "skipped", "status", "share",
    "time_ms", "time_share",
]  # fmt: skip


@dataclass(frozen=True)
class Coverage:
    """One model's nodes by class: constant (weights), layout-only (zero cost), and the operators, which an
    available benchmark serves, none serves, or that could not be extracted (skipped)."""

    model: str
    total: int
    constant: int
    layout: int
    served: int
    unserved: int
    skipped: int

    @property
    def operators(self) -> int:
        return self.served + self.unserved + self.skipped

    @property
    def served_fraction(self) -> float:
        """Share of the nodes that are neither constant nor layout-only that a benchmark serves."""
        return self.served / self.operators if self.operators else 1.0

    def metrics(self) -> dict[str, float]:
        return {
            "nodes_total": float(self.total),
            "nodes_constant": float(self.constant),
            "nodes_layout": float(self.layout),
            "nodes_served": float(self.served),
            "nodes_unserved": float(self.unserved),
            "nodes_skipped": float(self.skipped),
            "nodes_served_fraction": self.served_fraction,
        }


def model_coverage(extraction: Extraction, served_types: frozenset[str] | set[str]) -> Coverage:
    """Coverage from what the registry serves here (``served_types``, see :class:`BenchmarkPlan`)."""
    served = sum(1 for n in extraction.compute_nodes if n.op_type in served_types)
    return Coverage(
        model=extraction.model_name,
        total=extraction.total_nodes,
        constant=extraction.constant_nodes,
        layout=len(extraction.layout_nodes),
        served=served,
        unserved=len(extraction.compute_nodes) - served,
        skipped=len(extraction.skipped),
    )


def _status(constant: int, layout: int, served: int, unserved: int, skipped: int) -> str:
    if served + unserved + skipped == 0:
        return "layout-only" if layout else "constant"
    if unserved == skipped == 0:
        return "served"
    if served == unserved == 0:
        return "not extracted"
    return "no benchmark" if served == 0 else "partly served"


def coverage_frame(extraction: Extraction, plan: BenchmarkPlan, results: Sequence[pd.DataFrame] = ()) -> pd.DataFrame:
    """Per op_type of the model: its nodes by class, its share of the operator nodes (neither constant nor
    layout-only), and its share of the benchmarked time (median x count over ``results``)."""
    constant = extraction.constant_counts
    layout = Counter(n.op_type for n in extraction.layout_nodes)
    compute = Counter(n.op_type for n in extraction.compute_nodes)
    skipped = Counter(s.op_type for s in extraction.skipped)
    time_ms: Counter[str] = Counter()
    for frame in results:
        ok = frame[frame["status"] == "ok"]
        for op_type, median, count in zip(ok["op_type"], ok["median_ms"], ok["count"], strict=True):
            time_ms[op_type] += float(median) * int(count)
    total_time = sum(time_ms.values())
    operators = sum(compute.values()) + sum(skipped.values()) or 1
    rows = []
    for op_type, count in extraction.node_counts.items():
        served = compute[op_type] if op_type in plan.served_types else 0
        unserved = compute[op_type] - served
        row = {
            "op_type": op_type,
            "nodes": count,
            "constant": constant.get(op_type, 0),
            "layout": layout[op_type],
            "served": served,
            "unserved": unserved,
            "skipped": skipped[op_type],
            "status": _status(constant.get(op_type, 0), layout[op_type], served, unserved, skipped[op_type]),
            "share": (compute[op_type] + skipped[op_type]) / operators,
            "time_ms": time_ms.get(op_type, 0.0),
            "time_share": time_ms.get(op_type, 0.0) / total_time if total_time else 0.0,
        }
        rows.append(row)
    return pd.DataFrame(rows, columns=COVERAGE_COLUMNS)


def time_share_metrics(coverage: pd.DataFrame) -> dict[str, float]:
    """``time_share.<op_type>``: each op type's share of the model's benchmarked time."""
    timed = coverage[coverage["time_ms"] > 0]
    return {f"time_share.{t}": float(v) for t, v in zip(timed["op_type"], timed["time_share"], strict=True)}


def print_coverage(coverage: pd.DataFrame, plan: BenchmarkPlan, backend: str, device: str, summary: Coverage) -> None:
    print(f"\nbenchmarks of backend {backend!r} on {device}:")
    for entry, ops in plan.assignments:
        counts = Counter(op.op_type for op in ops)
        print(f"  {entry.name}: {len(ops)} operations ({', '.join(f'{t} {n}' for t, n in counts.items())})")
    for name, reason in plan.unavailable.items():
        print(f"  {name}: not available here ({reason})")
    print(
        f"coverage of {summary.model}: {summary.total} nodes = {summary.constant} constant (weights) + "
        f"{summary.layout} layout-only (cost 0) + {summary.operators} operators, of which {summary.served} served "
        f"({100 * summary.served_fraction:.1f}%), {summary.unserved} with no {backend!r} benchmark, "
        f"{summary.skipped} not extracted"
    )
    missing = coverage[(coverage["unserved"] > 0) | (coverage["skipped"] > 0)]
    if len(missing):
        print("operators no benchmark serves (share of the operator nodes):")
        for row in missing.itertuples():
            count = int(row.unserved) + int(row.skipped)
            print(f"  {row.op_type:24s} {count:5d} nodes  {100 * row.share:5.1f}%  {row.status}")
    if not plan.assignments:
        print("  (no benchmark serves any operator of this model)")
