"""Where a multi-threaded training step's prediction loses time: evaluations at threads=1 and at more threads side by
side, per prediction term and per op type, as absolute milliseconds and as speedups of the benchmarks and of
the training.

    python bench/prediction_error.py --models resnet_cifar --batch-sizes 16 --threads 1 --steps 12 \\
        --store /tmp/t.db --experiment threads1
    python bench/prediction_error.py --models resnet_cifar --batch-sizes 16 --threads 2 --steps 12 \\
        --store /tmp/t.db --experiment threads2
    python bench/threads_gap.py --store /tmp/t.db --experiments threads1 threads2

Read it this way: ``gap_ms`` (measured - predicted) the same at every thread count means a serial cost the
prediction lacks (its share grows as the operators speed up: Amdahl, not threading); a gap that grows with the
threads, with the op types whose ``train_speedup`` falls short of their ``bench_speedup``, means operators run
slower in the training than in their benchmarks at that thread count. The profiled times (``in_training_ms``)
carry the profiler's own cost per call; compare their speedups, not their values. Nothing here is fitted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN_COLUMNS = {
    "params.threads": "threads",
    "params.benchmark_threads": "benchmark_threads",
    "metrics.step_time_measured_ms": "measured_ms",
    "metrics.step_time_predicted_ms": "predicted_ms",
    "metrics.prediction_error_pct": "error_pct",
    "metrics.machine_drift_pct": "drift_pct",
    "metrics.load_average_start": "load_start",
    "metrics.load_average_end": "load_end",
}


def evaluations(store: str, experiments: list[str]):
    """Finished evaluations of the experiments, one row each, oldest first."""
    import pandas as pd

    from dlbench.tracking.store import resolve_tracking, search_runs

    target = resolve_tracking(f"sqlite:///{Path(store).resolve()}", experiments[0])
    runs = search_runs(target, "attributes.status = 'FINISHED'", experiments)
    if runs.empty:
        raise SystemExit(f"{store}: no finished runs in experiments {', '.join(experiments)}")
    runs = runs[runs["tags.dlbench.kind"] == "evaluation"] if "tags.dlbench.kind" in runs else runs
    frame = pd.DataFrame({"run_id": runs["run_id"], "benchmark": runs.get("params.benchmark", "")})
    for column, name in RUN_COLUMNS.items():
        frame[name] = pd.to_numeric(runs[column], errors="coerce") if column in runs else float("nan")
    if frame["threads"].isna().all():  # an evaluation from before benchmark_threads was logged
        frame["threads"] = frame["benchmark_threads"]
    frame["gap_ms"] = frame["measured_ms"] - frame["predicted_ms"]
    frame["start"] = runs["start_time"]
    return target, frame.sort_values("start").reset_index(drop=True)


def tables(target, run_ids, name: str):
    """Artifact ``name`` of every run, with its ``run_id``."""
    import pandas as pd

    from dlbench.tracking.store import download_artifact

    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for run_id in run_ids:
            path = download_artifact(target, run_id, name, Path(tmp) / run_id)
            parts.append(pd.read_csv(path).assign(run_id=run_id))
    return pd.concat(parts, ignore_index=True)


def side_by_side(frame, values: list[str], key: str, threads: dict[str, float]):
    """Median of ``values`` per ``key`` and thread count, one column per (value, threads)."""
    table = frame.assign(threads=frame["run_id"].map(threads))
    return table.groupby([key, "threads"])[values].median().unstack("threads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="SQLite file of the evaluations")
    parser.add_argument("--experiments", nargs="+", required=True, help="experiments holding them")
    args = parser.parse_args()
    import pandas as pd

    pd.set_option("display.width", 220)
    target, runs = evaluations(args.store, args.experiments)
    print("evaluations (gap_ms = measured - predicted):")
    print(runs.drop(columns=["start"]).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    counts = sorted(runs["threads"].dropna().unique())
    if len(counts) < 2:
        print("only one thread count: nothing to put side by side")
        return 0
    low, high = counts[0], counts[-1]
    medians = runs.groupby("threads")[["measured_ms", "predicted_ms", "gap_ms", "error_pct"]].median()
    print("\nmedian per thread count:")
    print(medians.to_string(float_format=lambda v: f"{v:.3g}"))
    threads = dict(zip(runs["run_id"], runs["threads"], strict=True))
    terms = side_by_side(tables(target, runs["run_id"], "prediction_terms.csv"), ["ms"], "term", threads)
    print(f"\nprediction terms, ms (benchmarks at threads={low:g} and {high:g}):")
    print(terms.to_string(float_format=lambda v: f"{v:.3g}"))
    types = side_by_side(
        tables(target, runs["run_id"], "op_types.csv"), ["predicted_ms", "in_training_ms"], "op_type", threads
    )
    types[("bench_speedup", "")] = types[("predicted_ms", low)] / types[("predicted_ms", high)]
    types[("train_speedup", "")] = types[("in_training_ms", low)] / types[("in_training_ms", high)]
    types = types.sort_values(("in_training_ms", low), ascending=False)
    print(f"\nper op type (profiled step for in_training_ms); speedups from threads={low:g} to {high:g}:")
    print(types.to_string(float_format=lambda v: f"{v:.3g}"))
    parts = side_by_side(tables(target, runs["run_id"], "time_breakdown.csv"), ["ms"], "part", threads)
    print("\nprofiled step by part, ms (framework and outside operators do not shrink with threads):")
    print(parts.to_string(float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
