"""Measure dlbench's own cost around the kernels.

1. Start-up: wall time of ``python -m dlbench --help`` (median of several runs).
2. Sweep overhead: wall time of ``python -m dlbench +benchmark=conv`` (ResNet-50's 23 convolutions) minus
   the time the kernels were being timed (warm-up + repetitions, from the run's results.csv). The first
   repeat also creates the MLflow store; later ones log into the existing store, as a user's runs do.

Usage: python bench/overhead.py [--batch-size 1] [--repeats 3] [--out overhead.csv]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, text=True)  # noqa: S603
    return time.perf_counter() - start


def kernel_seconds(results: pd.DataFrame, warmup: int) -> float:
    """Time spent inside timed kernel calls: every repetition plus the warm-up calls (at the median)."""
    ok = results[results["status"] == "ok"]
    return float(((ok["mean_ms"] * ok["reps"]) + warmup * ok["median_ms"]).sum() / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--min-reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        help_times = [timed([sys.executable, "-m", "dlbench", "--help"], work, env) for _ in range(5)]
        store = work / "store"  # one store, as a user has: the first run also creates the SQLite schema
        store.mkdir()
        for repeat in range(args.repeats):
            command = [
                sys.executable,
                "-m",
                "dlbench",
                "+benchmark=conv",
                f"batch_size={args.batch_size}",
                f"measure.warmup={args.warmup}",
                f"measure.min_reps={args.min_reps}",
                "measure.min_time_s=0",
                "quiet=true",
            ]
            wall = timed(command, store, env)
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
            experiment = client.get_experiment_by_name("dlbench")
            run = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]
            results = pd.read_csv(client.download_artifacts(run.info.run_id, "results.csv", str(store)))
            kernels = kernel_seconds(results, args.warmup)
            n_ops = len(results)
            rows.append(
                {
                    "repeat": repeat,
                    "store": "new" if repeat == 0 else "existing",
                    "wall_s": wall,
                    "kernel_s": kernels,
                    "overhead_s": wall - kernels,
                    "n_operations": n_ops,
                    "overhead_per_op_ms": 1e3 * (wall - kernels) / n_ops,
                }
            )
    frame = pd.DataFrame(rows)
    help_median = statistics.median(help_times)
    print(f"python -m dlbench --help: median {help_median:.2f} s over 5 runs (aim < 2 s)")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    best = frame.sort_values("overhead_s").iloc[0]
    budget = 2.0 + 0.005 * best["n_operations"]
    print(
        f"sweep overhead (best of {args.repeats}): {best['overhead_s']:.2f} s for {int(best['n_operations'])} "
        f"operations; aim < {budget:.2f} s (2 s + 5 ms per operation)"
    )
    if args.out:
        frame.assign(help_median_s=help_median).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
