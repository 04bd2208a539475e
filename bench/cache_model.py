"""The cache state of the operator benchmarks against the training step, for one model and batch size: the
footprint `evaluate.caches=step` chose per operation, each operation's benchmark time hot, with that footprint
(step) and cold (twice the last-level cache), and the training time per op type, so two machines read the same
table.

    python bench/cache_model.py --model resnet_cifar --batch-size 16 --threads 1
    python bench/cache_model.py --model cnn_multilabel -- --config-dir bench/unlike_ours/conf   # a user's script

One `task=evaluate` (caches=step) gives the step's operations, their footprints, the training profile and the
prediction; then every embedded torch benchmark of that run is timed again three times over the very rows it
measured (`DLBENCH_CACHES=hot`, `step` with the run's footprints file, `cold`), one state after the other per
benchmark, so the three are compared on the same spell of the machine. Prints the machine's CPU and caches, the
load average before and after, the operations with the most training time, and the sums per op type:
occurrences x benchmark median per cache state next to the time the profiled step spent in them.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import STORE_HELP, load_average, print_table, run_evaluation, runs_table, store_uri  # noqa: E402

STATES = ("hot", "step", "cold")
MIB = 1 << 20


def cpu_line() -> str:
    """The CPU model and the cache sizes sysfs reports for cpu0."""
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
            caches.append(f"L{level}{kind[0].lower() if kind != 'Unified' else ''} {size}")
        except OSError:
            continue
    return f"{model}; {', '.join(caches)}"


def remeasure(protocol: Path, operations, threads: int, workdir: Path):
    """Median ms per operation id and cache state: every ``*_evaluate.csv`` input of an embedded torch
    benchmark run again with each state."""
    import pandas as pd

    from dlbench.operators.protocol import parse_output, read_input
    from dlbench.operators.runner import RunSettings

    op_types = dict(zip(operations["id"], operations["op_type"], strict=True))
    rows = []
    for source in sorted(protocol.glob("*_evaluate.csv")):
        ids = [op_id for op_id, _ in read_input(source)]
        kinds = {op_types.get(op_id) for op_id in ids}
        if len(kinds) != 1 or None in kinds:
            continue
        op_type = kinds.pop()
        for state in STATES:
            target = workdir / state / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            # the footprints the evaluation handed this benchmark (one file per interleaved round, the same rows)
            footprints = sorted(source.parent.glob(f"{source.stem}*_footprints.csv"))
            if footprints:
                shutil.copy(footprints[0], target.with_name(f"{target.stem}_footprints.csv"))
            # the runner's environment: the measurement settings and the allocator keeping freed memory
            settings = RunSettings(threads=threads, caches=state)
            env = {**os.environ, **settings.environment(), "PYTHONPATH": str(ROOT)}
            command = [sys.executable, "-m", "dlbench.backends.torch", op_type, str(target)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=1800)  # noqa: S603
            if done.returncode not in (0, 1):
                print(f"{source.name} ({state}): {done.stderr[-500:]}", file=sys.stderr)
                continue
            parsed = parse_output(target.with_name(f"{target.stem}_out.csv"), ids)
            rows += [{"id": i, "state": state, "ms": s.median_ms} for i, s in parsed.rows.items()]
    return pd.DataFrame(rows).pivot_table(index="id", columns="state", values="ms") if rows else pd.DataFrame()


def tables(operations, times):
    """The per-operation table (ms per call) and the per-op-type sums (ms per step)."""
    frame = operations.set_index("id").join(times, how="inner")
    frame["footprint_MiB"] = frame["footprint_bytes"] / MIB
    frame["training_ms_per_call"] = frame["in_training_ms"] / frame["occurrences"]
    per_op = frame.reset_index()[
        ["id", "op_type", "pass", "occurrences", "footprint_MiB", *STATES, "training_ms_per_call"]
    ].sort_values("training_ms_per_call", ascending=False)
    for state in STATES:
        frame[f"{state}_ms"] = frame[state] * frame["occurrences"]
    sums = frame.groupby("op_type")[[f"{s}_ms" for s in STATES] + ["in_training_ms"]].sum()
    sums.loc["total"] = sums.sum()
    for state in STATES:
        sums[f"training/{state}"] = sums["in_training_ms"] / sums[f"{state}_ms"]
    return per_op, sums.sort_values("in_training_ms", ascending=False).reset_index()


def main() -> int:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the tables are the output
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet_cifar")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--store", default=str(ROOT / ".dlbench" / "bench" / "cache_model.db"), help=STORE_HELP)
    parser.add_argument("--experiment", default="cache_model")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--top", type=int, default=15, help="operations shown, by training time")
    parser.add_argument("--run-name", default="", help="time again the benchmarks of this evaluation in the store")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for the evaluation")
    args = parser.parse_args()
    import pandas as pd

    from dlbench.tracking.store import download_artifact, resolve_tracking

    print(f"machine: {cpu_line()}")
    print(f"load average before: {load_average()}")
    uri = store_uri(args.store)
    overrides = [f"+benchmark={args.model}", f"batch_size={args.batch_size}", f"threads={args.threads}",
                 f"steps={args.steps}", "evaluate.caches=step", *args.overrides]  # fmt: skip
    if args.run_name:  # an evaluation already in the store: its benchmarks timed again only
        run_name, seconds = args.run_name, 0.0
    else:
        run_name, seconds = run_evaluation(f"{args.model}-bs{args.batch_size}-step", overrides, uri,
                                           args.experiment, args.timeout)  # fmt: skip
    runs = runs_table(uri, args.experiment, [{"run_name": run_name}],
                      ["step_time_predicted_ms", "step_time_measured_ms", "prediction_error_pct",
                       "step_working_set_bytes", "load_average_start", "load_average_end"])  # fmt: skip
    print_table(runs)
    if runs.iloc[0]["status"] != "FINISHED":
        return 1
    with tempfile.TemporaryDirectory(prefix="cache_model_") as tmp:
        target, work = resolve_tracking(uri, args.experiment), Path(tmp)
        run_id = runs.iloc[0]["run_id"]
        operations = pd.read_csv(download_artifact(target, run_id, "operations.csv", work))
        protocol = download_artifact(target, run_id, "protocol", work)
        times = remeasure(protocol, operations, args.threads, work / "again")
    per_op, sums = tables(operations, times)
    print(f"\nevaluation {seconds:.0f} s; operations by training time (ms per call; footprint chosen by the step):")
    print_table(per_op.head(args.top))
    print("\nper op type, ms per step (occurrences x benchmark median) and training / benchmark:")
    print_table(sums)
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
