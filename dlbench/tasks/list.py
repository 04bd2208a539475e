"""task=list: registered benchmarks, and which are available here and why not."""

from __future__ import annotations

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.operators.registry import command_availability, load_registry


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    registry = load_registry(ctx.config_dirs)
    rows = []
    for entry in sorted(registry.operators, key=lambda e: (e.backend, e.name)):
        reason = entry.unavailable_reason
        rows.append(
            (
                entry.name,
                entry.backend,
                ",".join(entry.devices),
                ",".join(dict.fromkeys((entry.name, *entry.synonyms))),
                "available" if not reason else f"not available: {reason}",
            )
        )
    header = ("name", "backend", "device", "serves", "status")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    print("Operator benchmarks (registry/*.yaml on the config path):")
    for row in [header, *rows]:
        print("  " + "  ".join(str(v).ljust(w) for v, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    if registry.trainings:
        print("\nTraining benchmarks (training/*.yaml):")
        for t in registry.trainings:
            reason = command_availability(t.command)
            status = "available" if not reason else f"not available: {reason}"
            print(f"  {t.name:20s} {' '.join(t.command[1:]) or t.command[0]:60s} {status}")
    print("\nConfig path searched: " + ", ".join(str(d) for d in ctx.config_dirs))
    return 0
