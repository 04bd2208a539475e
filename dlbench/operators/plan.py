"""Which registered implementation measures which operation: entries of the chosen backend and device that
serve each op_type, what is unavailable here and why, and which op types nothing serves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dlbench.core.errors import TaskFailed
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
    raise TaskFailed(
        f"no {backend!r} benchmark for {op_type} on device {device!r} is registered; registered for {op_type}: "
        f"{offered}"
    )


@dataclass(frozen=True)
class BenchmarkPlan:
    """Which benchmark measures which operations, and what nothing here serves."""

    assignments: tuple[tuple[OperatorBenchmark, tuple[Operation, ...]], ...]
    unavailable: Mapping[str, str]  # benchmark name -> why it cannot run here
    unserved: Mapping[str, int]  # op_type -> ONNX nodes of it no available benchmark serves


def plan_benchmarks(registry: Registry, operations: Sequence[Operation], backend: str, device: str) -> BenchmarkPlan:
    """Every available ``backend`` entry for ``device`` gets all operations whose op_type it serves."""
    by_entry: dict[str, list[Operation]] = {}
    entries: dict[str, OperatorBenchmark] = {}
    unavailable: dict[str, str] = {}
    unserved: Counter[str] = Counter()
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
        if not served:
            unserved[op.op_type] += len(op.nodes) if op.nodes else op.count
    return BenchmarkPlan(
        assignments=tuple((entries[name], tuple(ops)) for name, ops in by_entry.items()),
        unavailable=unavailable,
        unserved=dict(unserved.most_common()),
    )


def coverage_frame(extraction: Extraction, plan: BenchmarkPlan) -> pd.DataFrame:
    """Per op_type of the model: its nodes, whether a benchmark serves it, and its share of all nodes."""
    total = extraction.total_nodes or 1
    served_types = {op.op_type for _, ops in plan.assignments for op in ops}
    skipped = Counter(s.op_type for s in extraction.skipped)
    rows = []
    for op_type, count in extraction.node_counts.items():
        if op_type in served_types:
            status = "served"
        elif op_type == "Constant":
            status = "weights"
        elif skipped.get(op_type) == count:
            status = "not extracted"
        else:
            status = "no benchmark"
        rows.append({"op_type": op_type, "nodes": count, "share": count / total, "status": status})
    return pd.DataFrame(rows, columns=["op_type", "nodes", "share", "status"])


def print_coverage(coverage: pd.DataFrame, plan: BenchmarkPlan, backend: str, device: str) -> None:
    print(f"\nbenchmarks of backend {backend!r} on {device}:")
    for entry, ops in plan.assignments:
        counts = Counter(op.op_type for op in ops)
        print(f"  {entry.name}: {len(ops)} operations ({', '.join(f'{t} {n}' for t, n in counts.items())})")
    for name, reason in plan.unavailable.items():
        print(f"  {name}: not available here ({reason})")
    missing = coverage[coverage["status"] != "served"]
    if len(missing):
        print("operators no benchmark serves (share of the model's nodes):")
        for row in missing.itertuples():
            print(f"  {row.op_type:24s} {row.nodes:5d} nodes  {100 * row.share:5.1f}%  {row.status}")
    if not plan.assignments:
        print("  (no benchmark serves any operator of this model)")
