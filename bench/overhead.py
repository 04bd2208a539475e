"""Measure dlbench's own cost around the kernels, against the targets of its command line, in one run.

  command                               target
  python -m dlbench --help              <= 1 s
  python -m dlbench task=list           <= 2 s
  task=extract of a ResNet-50 ONNX      <= 3 s, the whole command (the model is exported from torch first)
  +benchmark=conv sweep                 overhead <= 2 s + 5 ms per operation: wall time minus the time the
                                        kernels were timed (warm-up + repetitions, from the run's results.csv)
  the same sweep, dlbench's own         <= 1 s above the library floor: the overhead above less what one
                                        fresh interpreter takes to import MLflow, open the same store and
                                        import torch (what any command tracking a torch sweep pays)

Every command starts Python and imports what it needs itself, as a user's command does (no process outlives
a command). Each figure is the median over ``--repeats`` runs (the sweep: over the runs into an existing
store; the first run, which also creates the store, is shown apart, against a floor that creates one too).
The floors are shown as well, each in a fresh interpreter: starting Python, importing MLflow, opening a
SQLite store, importing torch and onnx. The load average is printed before and after: on a busy machine
every figure grows; compare ratios measured on a quiet one.
``cpu_s`` is the CPU time (user + system) of the command and its children, which a busy machine inflates less
than wall time (a sweep's includes its kernels, on every thread they use).

Usage: python bench/overhead.py [--repeats 3] [--batch-size 1] [--out overhead.csv] [--fail-above RATIO]
``--fail-above`` exits with 1 when a command's median exceeds RATIO times its target (a loose guard for CI;
the figures derived from others, dlbench's own above the floor, are reported and not guarded).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

BENCH = Path(__file__).resolve().parent
#: What no command that tracks a torch sweep can start for less, and dlbench's own target above it.
FLOOR_WHAT = "python + MLflow + SQLite store + torch"
FLOOR = f"floor: {FLOOR_WHAT}"
OWN = "conv sweep, dlbench's own above the floor"
OWN_TARGET_S = 1.0


def load_average() -> str:
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


#: CPU seconds (user + system) of every finished command, in order: less sensitive to a busy machine than wall
#: time for the single-threaded commands (the sweep's include its kernels' threads)
CPU_SECONDS: list[float] = []


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    seconds = time.perf_counter() - start
    CPU_SECONDS.append(_children_cpu() - cpu)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return seconds


def dlbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "dlbench", *args]


def kernel_seconds(results: pd.DataFrame, warmup: int) -> float:
    """Time spent inside timed kernel calls: every repetition plus the warm-up calls (at the median)."""
    ok = results[results["status"] == "ok"]
    return float(((ok["mean_ms"] * ok["reps"]) + warmup * ok["median_ms"]).sum() / 1e3)


def latest_results(store: Path) -> pd.DataFrame:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("dlbench")
    run = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]
    with tempfile.TemporaryDirectory() as tmp:
        return pd.read_csv(client.download_artifacts(run.info.run_id, "results.csv", tmp))


def export_resnet50(path: Path) -> Path:
    import torch

    sys.path.insert(0, str(BENCH))
    from extract_speed import ResNet50, export

    torch.manual_seed(0)
    export(ResNet50(), torch.randn(1, 3, 224, 224), path, False)
    return path


def floor_code(db: Path) -> str:
    """What any command that tracks an operator sweep must do, with nothing of dlbench: import MLflow, open the
    SQLite store ``db`` (created when missing) and import torch, one after the other. dlbench imports torch in
    its kernels' worker while it opens the store, so on a machine with a core to spare it may start for less."""
    store = f"from mlflow.tracking import MlflowClient; MlflowClient('sqlite:///{db}').search_experiments()"
    return f"{store}; import torch"


def library_floor(work: Path, env: dict[str, str], repeats: int, new_store: bool) -> list[float]:
    """Seconds of :func:`floor_code` in a fresh interpreter: into one existing store, or a new store each time."""
    existing = work / "floor_store" / "mlflow.db"
    if not new_store and not existing.exists():
        existing.parent.mkdir()
        timed([sys.executable, "-c", floor_code(existing)], work, env)  # created once, outside the figure
    seconds = []
    for repeat in range(repeats):
        db = work / f"floor_new_store_{repeat}" / "mlflow.db" if new_store else existing
        db.parent.mkdir(exist_ok=True)
        seconds.append(timed([sys.executable, "-c", floor_code(db)], work, env))
    return seconds


def commands(env: dict[str, str], work: Path, model: Path, args: argparse.Namespace, figure) -> None:
    """The command-line figures, and dlbench's own share of a sweep above the library floor."""
    figure("--help", [timed(dlbench("--help"), work, env) for _ in range(max(5, args.repeats))], 1.0)
    figure("task=list", [timed(dlbench("task=list"), work, env) for _ in range(args.repeats)], 2.0)

    store = work / "store"  # one store, as a user has: the first command also creates the SQLite schema
    store.mkdir()
    sweep = dlbench(
        "+benchmark=conv",
        f"batch_size={args.batch_size}",
        f"measure.warmup={args.warmup}",
        f"measure.min_reps={args.min_reps}",
        "measure.min_time_s=0",
        "quiet=true",
    )

    def overhead(folder: Path) -> tuple[float, int]:
        """The sweep's wall time less its timed kernel calls, and its number of operations."""
        wall = timed(sweep, folder, env)
        results = latest_results(folder)
        return wall - kernel_seconds(results, args.warmup), len(results)

    new_stores: list[float] = []
    for repeat in range(args.repeats):  # each the first run into a store of its own: it creates the schema
        fresh = work / f"new_store_{repeat}"
        fresh.mkdir()
        new_stores.append(overhead(fresh)[0])
    overhead(store)  # creates the store the next runs share
    overheads, counts = zip(*(overhead(store) for _ in range(args.repeats)), strict=True)
    n_ops = counts[-1]
    target = 2.0 + 0.005 * n_ops
    figure("conv sweep overhead, new store", new_stores, target, f"{n_ops} operations, first run each")
    figure("conv sweep overhead", list(overheads), target, f"{n_ops} operations, target 2 s + 5 ms each")

    floor = library_floor(work, env, args.repeats, new_store=False)
    figure(FLOOR, floor, None, "one interpreter, an existing store")
    new_floor = library_floor(work, env, args.repeats, new_store=True)
    figure(f"{FLOOR}, new store", new_floor, None, "one interpreter, creating the store")
    own = statistics.median(overheads) - statistics.median(floor)
    figure(OWN, [own], OWN_TARGET_S, f"{n_ops} operations: sweep overhead less the floor, medians", False)
    new_own = statistics.median(new_stores) - statistics.median(new_floor)
    figure(f"{OWN}, new store", [new_own], OWN_TARGET_S, f"{n_ops} operations, first run each, less the floor", False)
    print(f"dlbench's own cost above the library floor ({FLOOR_WHAT}), {n_ops}-operation conv sweep: "
          f"{own:.2f} s, {new_own:.2f} s with a new store (target {OWN_TARGET_S:g} s)", flush=True)  # fmt: skip

    extract = dlbench("task=extract", f"model={model}", "batch_size=32")
    figure("task=extract resnet50", [timed(extract, store, env) for _ in range(args.repeats)], 3.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--min-reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--fail-above", type=float, default=0.0, help="exit 1 when a median exceeds RATIO x target")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # this script's own downloads
    before = load_average()
    print(f"before: {before}", flush=True)
    rows: list[dict[str, object]] = []

    def figure(name: str, seconds: list[float], target: float | None, note: str = "", timed_now: bool = True) -> None:
        """A row: the commands just timed, or (``timed_now`` false) a figure derived from other rows."""
        median = statistics.median(seconds)
        cpu = statistics.median(CPU_SECONDS[-len(seconds) :]) if timed_now else None
        rows.append({"command": name, "median_s": median, "min_s": min(seconds), "cpu_s": cpu, "runs": len(seconds),
                     "target_s": target, "ratio": median / target if target else None, "derived": not timed_now,
                     "note": note})  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="dlbench_overhead_") as tmp:
        work = Path(tmp)
        store_code = (
            f"from mlflow.tracking import MlflowClient; MlflowClient('sqlite:///{work}/f.db').search_experiments()"
        )
        for what, code in (("python", "pass"), ("import mlflow", "import mlflow"),
                           ("mlflow + a SQLite store", store_code), ("import torch", "import torch"),
                           ("import onnx", "import onnx")):  # fmt: skip
            floor = [timed([sys.executable, "-c", code], work, env) for _ in range(args.repeats)]
            figure(f"floor: {what}", floor, None)
        model = export_resnet50(work / "resnet50.onnx")
        commands(env, work, model, args, figure)

    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 160, "display.max_colwidth", 60):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.2f}", na_rep=""))
    after = load_average()
    print(f"after: {after} ({os.cpu_count()} CPUs); targets are for a quiet machine")
    if args.out:
        frame.assign(load_before=before, load_after=after).to_csv(args.out, index=False)
    # the guard is for commands: a difference of two medians on a busy machine swings too far for a loose bound
    guarded = frame[frame["ratio"].notna() & ~frame["derived"]]
    over = guarded[guarded["ratio"] > args.fail_above] if args.fail_above else frame.iloc[0:0]
    for row in over.itertuples():
        print(f"{row.command}: {row.median_s:.2f} s is {row.ratio:.1f}x its target of {row.target_s:g} s")
    return 1 if len(over) else 0


if __name__ == "__main__":
    sys.exit(main())
