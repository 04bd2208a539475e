"""How well operator and collective benchmarks predict a data-parallel training step: `task=evaluate` of the
DistributedDataParallel MLP (+benchmark=mlp_ddp) at world_size 2 and two batch sizes per rank; prints the
predicted step (single-process prediction + exposed all-reduce), the measured step, the error, the
all-reduce in all and exposed, and the predicted scaling efficiency.

    python bench/data_parallel_prediction.py                          # world_size 2, batch sizes 32 and 128
    python bench/data_parallel_prediction.py --batch-sizes 16 --steps 16 --rounds 1   # a quick check
    python bench/data_parallel_prediction.py --world-size 2 --rounds 3  # interleaved rounds, medians

threads is per rank (default 1: two ranks on a two-core machine). Each evaluation is one MLflow run in a
store of its own (default .dlbench/bench/data_parallel.db). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLUMNS = (
    "step_time_predicted_ms",
    "step_time_measured_ms",
    "prediction_error_pct",
    "step_time_single_process_predicted_ms",
    "allreduce_total_ms",
    "allreduce_exposed_ms",
    "allreduce_buckets",
    "scaling_efficiency_predicted",
    "machine_drift_pct",
)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} logical cores)"


def evaluate(batch_size: int, args: argparse.Namespace, uri: str) -> tuple[str, float]:
    run_name = f"bench-ddp-ws{args.world_size}-bs{batch_size}-{int(time.time())}"
    command = [
        sys.executable, "-m", "dlbench", f"+benchmark={args.benchmark}", "task=evaluate",
        f"world_size={args.world_size}", f"batch_size={batch_size}", f"threads={args.threads}",
        f"steps={args.steps}", f"profile.warmup={args.warmup}", f"profile.batches={args.profiled}",
        f"mlflow.tracking_uri={uri}", f"mlflow.experiment={args.experiment}", f"mlflow.run_name={run_name}",
        "quiet=true", *args.overrides,
    ]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=args.timeout)  # noqa: S603
    if result.returncode != 0:
        print(f"bs{batch_size}: FAILED\n{result.stderr[-2000:]}", file=sys.stderr)
    return run_name, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mlp_ddp")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 128], help="samples per rank")
    parser.add_argument("--threads", type=int, default=1, help="threads per rank, and of the benchmarks")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profiled", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="evaluate every batch size this often, interleaved")
    parser.add_argument("--store", default=str(ROOT / ".dlbench" / "bench" / "data_parallel.db"))
    parser.add_argument("--experiment", default="data_parallel_prediction")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("overrides", nargs="*", help="extra dlbench overrides, e.g. measure.min_time_s=0.1")
    args = parser.parse_args()

    import pandas as pd

    from dlbench.tracking.store import resolve_tracking, search_runs

    Path(args.store).parent.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{Path(args.store).resolve()}"
    print(f"load average before: {load_average()}")
    names = []
    for round_ in range(args.rounds):
        for batch_size in args.batch_sizes:
            run_name, seconds = evaluate(batch_size, args, uri)
            names.append((round_, batch_size, run_name, seconds))
            print(f"  round {round_} bs{batch_size}: {seconds:.0f} s, load {load_average()}", flush=True)
    print(f"load average after: {load_average()}")
    runs = search_runs(resolve_tracking(uri, args.experiment), "", [args.experiment])
    rows = []
    for round_, batch_size, run_name, seconds in names:
        match = runs[runs["tags.mlflow.runName"] == run_name] if len(runs) else runs
        row = {"round": round_, "batch_size": batch_size, "seconds": seconds}
        if len(match):
            row["status"] = match.iloc[0]["status"]
            row.update({c: match.iloc[0].get(f"metrics.{c}") for c in COLUMNS})
        else:
            row["status"] = "missing"
        rows.append(row)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 220, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    ok = (
        table.dropna(subset=["step_time_predicted_ms", "step_time_measured_ms"])
        if "step_time_measured_ms" in table
        else table.iloc[0:0]
    )
    for batch_size, part in ok.groupby("batch_size"):
        predicted = statistics.median(part["step_time_predicted_ms"])
        measured = statistics.median(part["step_time_measured_ms"])
        print(
            f"bs{batch_size} x {args.world_size} ranks: predicted {predicted:.3g} ms, measured {measured:.3g} ms, "
            f"error {100 * (predicted / measured - 1):+.1f}% (median over {len(part)} rounds; aim: within 15%)"
        )
    return 0 if len(ok) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
