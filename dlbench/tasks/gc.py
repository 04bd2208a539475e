"""task=gc: runs whose job died without ending them (SIGKILL, the OOM killer, a lost node) stop beating; end
them FAILED with the reason "heartbeat lost", so no run of the experiment stays RUNNING forever. Then say what
dlbench's own folders ``.dlbench/`` hold, per kind, and remove the model files no run refers to: those in
``.dlbench/models/`` that no run of the store names, and copies left in the run folders of commands that ended
without storing them."""

from __future__ import annotations

from pathlib import Path

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.tracking import local_files
from dlbench.tracking.heartbeat import mark_lost_runs
from dlbench.tracking.runs import run_place
from dlbench.tracking.secrets import scrub
from dlbench.tracking.store import TrackingTarget


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def unreferenced(target: TrackingTarget, start_dir: Path, spare_s: float) -> list[Path]:
    """The model files no run refers to, of those younger than ``spare_s`` none (a command at work): in
    ``.dlbench/models/`` beside a SQLite store (another store's runs name none of them: they are left alone),
    and in the run folders of ended commands under ``start_dir/.dlbench/``."""
    found = local_files.stray_models(start_dir / local_files.FOLDER, spare_s)
    if local_files.sqlite_path(target.uri) is not None:
        models = local_files.local_folder(target.uri, start_dir) / local_files.MODELS
        found += local_files.unreferenced_models(models, local_files.referenced_models(target), spare_s)
    return found


def report(folder: Path) -> None:
    """What ``folder`` holds, per kind, largest first."""
    held = local_files.holdings(folder)
    print(f"{folder} holds {_mb(sum(size for _, size in held.values()))}" + (":" if held else ""))
    for kind, (files, size) in sorted(held.items(), key=lambda item: -item[1][1]):
        print(f"  {kind:32s} {files:6d} file(s) {_mb(size):>10s}")


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    target = run_place(cfg, ctx).target
    lost = mark_lost_runs(target, cfg.gc.stale_after_s)
    for run in lost:
        print(f"  {run.run_id}  {run.run_name}: FAILED, {run.reason}")
    print(
        f"task=gc: {len(lost)} run(s) of experiment {target.experiment!r} ({scrub(target.uri)}) had lost their "
        f"heartbeat for more than gc.stale_after_s={cfg.gc.stale_after_s:g} s and were marked FAILED"
    )
    removed = []
    for path in unreferenced(target, ctx.start_dir, cfg.gc.stale_after_s):
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another gc took it
            continue
        removed.append((path, size))
    for path, size in removed:
        print(f"  removed {path} ({_mb(size)})")
    print(f"task=gc: removed {len(removed)} model file(s) no run refers to ({_mb(sum(s for _, s in removed))})")
    folders = dict.fromkeys([local_files.local_folder(target.uri, ctx.start_dir), ctx.start_dir / local_files.FOLDER])
    for folder in folders:
        report(folder)
    return 0
