"""task=gc: runs whose job died without ending them (SIGKILL, the OOM killer, a lost node) stop beating; end
them FAILED with the reason "heartbeat lost", so no run of the experiment stays RUNNING forever."""

from __future__ import annotations

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.tracking.heartbeat import mark_lost_runs
from dlbench.tracking.runs import run_place
from dlbench.tracking.secrets import scrub


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    target = run_place(cfg, ctx).target
    lost = mark_lost_runs(target, cfg.gc.stale_after_s)
    for run in lost:
        print(f"  {run.run_id}  {run.run_name}: FAILED, {run.reason}")
    print(
        f"task=gc: {len(lost)} run(s) of experiment {target.experiment!r} ({scrub(target.uri)}) had lost their "
        f"heartbeat for more than gc.stale_after_s={cfg.gc.stale_after_s:g} s and were marked FAILED"
    )
    return 0
