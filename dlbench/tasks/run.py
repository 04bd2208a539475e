"""task=run: measure the chosen benchmark (operator sweep, training benchmark or roofline)."""

from __future__ import annotations

from dlbench.app import AppContext
from dlbench.config import DlbenchConfig


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    assert cfg.benchmark is not None
    kind = cfg.benchmark.kind
    if kind == "training":
        from dlbench.training import run_training_benchmark

        return run_training_benchmark(cfg, ctx)
    if kind == "roofline":
        from dlbench.roofline import run_roofline

        return run_roofline(cfg, ctx)
    from dlbench.sweep import run_operator_sweep

    return run_operator_sweep(cfg, ctx)
