"""How well operator and collective benchmarks predict a data-parallel training step: `task=evaluate` of the
DistributedDataParallel MLP (+benchmark=mlp_ddp) at world_size 2 and two batch sizes per rank; prints per
evaluation the predicted step (single-process prediction + DDP's gradient copies + exposed all-reduce), the
measured step and the error, every term of the prediction, the all-reduce in all and exposed (predicted, and
as rank 0's profile shows it), and the scaling efficiency predicted and measured (the same script as one
process, evaluate.single_process).

    python bench/data_parallel_prediction.py                          # world_size 2, batch sizes 16 and 64
    python bench/data_parallel_prediction.py --batch-sizes 16 --steps 16 --rounds 1   # a quick check
    python bench/data_parallel_prediction.py --rounds 3               # evaluate.rounds: each error's interval
    python bench/data_parallel_prediction.py --repeats 3              # every batch size 3 times, interleaved
    python bench/data_parallel_prediction.py evaluate.communication_overlap=backward  # the other overlap model

``--rounds`` is ``evaluate.rounds`` (default 3): each evaluation trains and benchmarks in alternating rounds
and gives its error with the 95% interval over the paired rounds (docs/training.md), printed with every error.
threads is per rank (default 1: two ranks on a two-core machine). Each evaluation is one MLflow run in a
store of its own (default .dlbench/bench/data_parallel.db). The load average is printed before, after each
evaluation and after; each run also logs its own (load_average_start/end).

The profile's figures are a check on the model, never an input to it: ``profiled_wait_ms`` is how long rank 0
waited after its backward pass for the all-reduce (the longest stretch without an operator on its thread
between the last all-reduce launch and DDP's copy of the reduced gradients back), ``profiled_allreduce_ms``
the span of gloo's all-reduce events.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import STORE_HELP, load_average, print_table, run_evaluation, runs_table, store_uri  # noqa: E402

COLUMNS = (
    "step_time_predicted_ms",
    "step_time_measured_ms",
    "prediction_error_pct",
    "prediction_error_lo_pct",
    "prediction_error_hi_pct",
    "step_time_single_process_predicted_ms",
    "ddp_gradient_copies_ms",
    "allreduce_total_ms",
    "allreduce_exposed_ms",
    "allreduce_hidden_by_backward",
    "allreduce_exposed_if_hidden_ms",
    "scaling_efficiency_predicted",
    "step_time_single_process_measured_ms",
    "scaling_efficiency_measured",
    "load_average_start",
    "load_average_end",
    "machine_drift_pct",
    "training_drift_pct",
)
COPY_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"


def profiled_communication(trace_path: Path) -> dict[str, float]:
    """From one profiled step's trace: rank 0's wait after its backward pass for the all-reduce, and the span of
    gloo's all-reduce events (ms)."""
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("ph") == "X"]
    gloo = [e for e in events if str(e.get("name", "")).startswith("gloo:all_reduce")]
    launches = [e for e in events if e.get("name") == "c10d::allreduce_"]
    copies = [e for e in events if e.get("name") == COPY_BACK]
    if not gloo or not launches or not copies:
        return {}
    main = launches[0]["tid"]
    last_launch, copy_start = max(e["ts"] for e in launches), min(e["ts"] for e in copies)
    wait, busy_until = 0.0, last_launch
    for event in sorted((e for e in events if e["tid"] == main and e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        if last_launch <= event["ts"] <= copy_start:  # the longest stretch with no operator on rank 0's thread
            wait = max(wait, event["ts"] - busy_until)
        busy_until = max(busy_until, event["ts"] + event["dur"])
    span = max(e["ts"] + e["dur"] for e in gloo) - min(e["ts"] for e in gloo)
    return {"profiled_wait_ms": wait / 1e3, "profiled_allreduce_ms": span / 1e3}


def profile_check(uri: str, run_id: str) -> dict[str, float]:
    """The median over the profiled steps of rank 0's :func:`profiled_communication`."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        folder = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="profile", tracking_uri=uri))
    except Exception as err:  # noqa: BLE001 - a check, not the result: say why it is missing
        print(f"no profile of run {run_id}: {err}", file=sys.stderr)
        return {}
    figures = [profiled_communication(p) for p in sorted(folder.glob("batch_*_trace.json"))]
    figures = [f for f in figures if f]
    return {k: statistics.median(f[k] for f in figures) for k in (figures[0] if figures else {})}


def term_table(uri: str, experiment: str, table):
    """Every term of each evaluation's prediction (the ``predicted_ms.*`` metrics), one column per evaluation."""
    from dlbench.tracking.store import resolve_tracking, search_runs

    runs = search_runs(resolve_tracking(uri, experiment), "", [experiment])
    columns = {}
    for _, row in table.iterrows():
        match = runs[runs["run_id"] == row.get("run_id")] if len(runs) else runs
        if len(match):
            record = match.iloc[0]
            label = f"x{row['repeat']} bs{row['batch_size']}"
            columns[label] = {
                k.removeprefix("metrics.predicted_ms."): record[k]
                for k in runs.columns
                if k.startswith("metrics.predicted_ms.") and record[k] == record[k]
            }
    import pandas as pd

    return pd.DataFrame(columns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mlp_ddp")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[16, 64], help="samples per rank")
    parser.add_argument("--threads", type=int, default=1, help="threads per rank, and of the benchmarks")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profiled", type=int, default=2)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="evaluate.rounds: trainings alternating with the benchmarks, for each error's interval",
    )
    parser.add_argument("--repeats", type=int, default=1, help="evaluate every batch size this often, interleaved")
    parser.add_argument("--store", default=str(ROOT / ".dlbench" / "bench" / "data_parallel.db"), help=STORE_HELP)
    parser.add_argument("--experiment", default="data_parallel_prediction")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("overrides", nargs="*", help="extra dlbench overrides, e.g. measure.min_time_s=0.1")
    args = parser.parse_args()

    uri = store_uri(args.store)
    print(f"load average before: {load_average()}")
    evaluations = []
    for round_ in range(args.repeats):
        for batch_size in args.batch_sizes:
            overrides = [
                f"+benchmark={args.benchmark}", f"world_size={args.world_size}", f"batch_size={batch_size}",
                f"threads={args.threads}", f"steps={args.steps}", f"profile.warmup={args.warmup}",
                f"profile.batches={args.profiled}", f"evaluate.rounds={args.rounds}", *args.overrides,
            ]  # fmt: skip
            label = f"ddp-ws{args.world_size}-bs{batch_size}"
            run_name, seconds = run_evaluation(label, overrides, uri, args.experiment, args.timeout)
            evaluations.append({"repeat": round_, "batch_size": batch_size, "seconds": seconds, "run_name": run_name})
            print(f"  repeat {round_} bs{batch_size}: {seconds:.0f} s, load {load_average()}", flush=True)
    print(f"load average after: {load_average()}")
    table = runs_table(uri, args.experiment, evaluations, COLUMNS)
    if "run_id" in table:
        checks = [profile_check(uri, r) if r == r else {} for r in table["run_id"]]
        for key in ("profiled_wait_ms", "profiled_allreduce_ms"):
            table[key] = [c.get(key) for c in checks]
    print_table(table.drop(columns=["run_id"], errors="ignore"))
    terms = term_table(uri, args.experiment, table) if "run_id" in table else None
    if terms is not None and len(terms):
        print("\nterms of the prediction (ms):")
        print_table(terms.reset_index(names="term"))
    ok = table.dropna(subset=["step_time_predicted_ms", "step_time_measured_ms"]) if "run_id" in table else table[:0]
    from dlbench.analysis.step_interval import error_text

    for row in ok.to_dict("records"):  # each evaluation's error with its interval over its paired rounds
        print(f"repeat {row['repeat']} bs{row['batch_size']} x {args.world_size} ranks: error {error_text(row)}")
    for batch_size, part in ok.groupby("batch_size"):
        predicted = statistics.median(part["step_time_predicted_ms"])
        measured = statistics.median(part["step_time_measured_ms"])
        efficiencies = part["scaling_efficiency_measured"].dropna()
        measured_efficiency = statistics.median(efficiencies) if len(efficiencies) else float("nan")
        print(
            f"bs{batch_size} x {args.world_size} ranks: predicted {predicted:.3g} ms, measured {measured:.3g} ms, "
            f"error {100 * (predicted / measured - 1):+.1f}% (median over {len(part)} repeats; aim: within 15%); "
            f"scaling efficiency predicted {statistics.median(part['scaling_efficiency_predicted']):.2f}, "
            f"measured {measured_efficiency:.2f}"
        )
    return 0 if len(ok) == len(evaluations) else 1


if __name__ == "__main__":
    sys.exit(main())
