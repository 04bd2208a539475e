"""How well operator benchmarks predict a training step: `task=evaluate` for the ResNet, the transformer, the
MLP and two scripts written unlike ours at several batch sizes on this machine; prints the prediction error and the
unexplained share.

    python bench/prediction_error.py                      # the five models at 16, 32, 64
    python bench/prediction_error.py --models mlp --batch-sizes 16 --threads 2
    python bench/prediction_error.py --rounds 3           # evaluate.rounds: each error with its 95% interval
    python bench/prediction_error.py --repeats 2          # every configuration twice, interleaved
    python bench/prediction_error.py --caches step cold hot  # the benchmarks' cache states side by side

The scripts unlike ours (``bench/unlike_ours/``: a GPT-style model with AdamW, gradient clipping, a tied
head, tanh GELU and hand-written attention; a MobileNet-style CNN with depthwise convolutions, ReLU6, dropout,
BCE-with-logits and RMSprop) are registered as a user registers their own (``bench/unlike_ours/conf``, passed
with ``--config-dir``). They are not held out: the MobileNet-style script was used in development to fix the
GELU and Clip rules (``dlbench/onnx/patterns.py``, hardtanh_backward), so their figures are development
figures, like those of the shipped benchmarks.

Each evaluation is one MLflow run in a store of its own (default .dlbench/bench/prediction_error.db), so the
figures can be looked at again with `mlflow ui --backend-store-uri sqlite:///...`. The machine's load
average is printed before and after: on a shared machine it decides how far the figures can be trusted.

Each evaluation also times two reference kernels before its training and after its benchmarks
(``machine_drift_pct``, see dlbench.operators.reference): how far the machine's own speed moved while it
ran. ``--rounds N`` is ``evaluate.rounds``: each evaluation trains and benchmarks in N alternating rounds and
gives its error with the 95% interval over the paired rounds (``prediction_error_lo_pct`` / ``_hi_pct``,
docs/training.md); every error is printed with it, and the widest interval is said. With ``--repeats N`` the
configurations are evaluated repeat after repeat (not N times in a row), so a slow spell of the machine hits
different configurations; each configuration's figure is then the median over its repeats of the predicted
and of the measured step time (two independent medians; nothing is fitted). Last, the training/benchmark
ratio of every op type (its time in the profiled step over its benchmark terms, ``op_types.csv``) per
configuration, with those over 5% of a step and outside 0.8-1.25 named.
The summary gives the error over all evaluations, and apart over those whose reference kernels moved by at
most the drift limit. ``--caches step cold hot`` evaluates each configuration with each cache state of the
operator benchmarks (``evaluate.caches``; default ``step``, the step's own footprints) one after the other, so
they are compared on the same spell of the machine; every summary is then given per cache state.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import STORE_HELP, load_average, print_table, run_evaluation, runs_table, store_uri  # noqa: E402

UNLIKE_OURS_CONF = ROOT / "bench" / "unlike_ours" / "conf"
MODELS = ["resnet_cifar", "transformer_lm", "mlp", "gpt_adamw", "cnn_multilabel"]

COLUMNS = (
    "step_time_predicted_ms",
    "step_time_measured_ms",
    "prediction_error_pct",
    "prediction_error_lo_pct",
    "prediction_error_hi_pct",
    "step_time_measured_lo_ms",
    "step_time_measured_hi_ms",
    "evaluation_rounds",
    "unexplained_time_pct",
    "uncovered_time_pct",
    "framework_time_pct",
    "unmatched_operator_time_pct",
    "outside_operators_pct",
    "covered_ratio_training_to_benchmark",
    "machine_drift_pct",
    "training_drift_pct",
    "outliers",
    "outlier_causes_reproduced",
    "predicted_step_with_causes_ms",
    "tensor_stats_batch_ms",
    "causes_retime_s",
)


def evaluate(
    model: str, batch_size: int, caches: str, args: argparse.Namespace, uri: str, experiment: str
) -> tuple[str, float]:
    overrides = [
        f"+benchmark={model}", f"batch_size={batch_size}", f"threads={args.threads}", f"steps={args.steps}",
        f"profile.warmup={args.warmup}", f"profile.batches={args.profiled}", f"evaluate.caches={caches}",
        f"evaluate.rounds={args.rounds}",
        "--config-dir", str(UNLIKE_OURS_CONF), *args.overrides,
    ]  # fmt: skip
    return run_evaluation(f"{model}-bs{batch_size}-{caches}", overrides, uri, experiment, args.timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[16, 32, 64])
    parser.add_argument("--threads", type=int, default=1, help="threads of training and benchmarks (0: all cores)")
    parser.add_argument(
        "--steps",
        type=int,
        default=32,
        help="training steps (the measured step: the median of the unprofiled ones after the warm-up)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="evaluate.rounds: trainings alternating with the benchmarks, for each error's interval",
    )
    parser.add_argument("--repeats", type=int, default=1, help="evaluate every configuration this often, interleaved")
    parser.add_argument(
        "--caches", nargs="+", default=["step"], choices=["step", "cold", "hot"], help="the benchmarks' cache states"
    )
    parser.add_argument("--warmup", type=int, default=5, help="training steps before the profiled ones")
    parser.add_argument("--profiled", type=int, default=2, help="profiled training steps")
    parser.add_argument("--store", default=str(ROOT / ".dlbench" / "bench" / "prediction_error.db"), help=STORE_HELP)
    parser.add_argument("--experiment", default="prediction_error")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", help="also write the table as CSV here")
    parser.add_argument("overrides", nargs="*", help="extra dlbench overrides, e.g. measure.min_time_s=0.1")
    args = parser.parse_args()

    uri = store_uri(args.store)
    print(f"load average before: {load_average()}")
    names = []
    for round_ in range(args.repeats):
        for model in args.models:
            for batch_size in args.batch_sizes:
                for caches in args.caches:
                    run_name, seconds = evaluate(model, batch_size, caches, args, uri, args.experiment)
                    names.append((round_, model, batch_size, caches, run_name, seconds))
                    print(
                        f"  repeat {round_} {model} bs{batch_size} caches={caches}: {seconds:.0f} s, "
                        f"load {load_average()}",
                        flush=True,
                    )
    print(f"load average after: {load_average()}")

    evaluations = [
        {"repeat": r, "model": m, "batch_size": b, "caches": c, "seconds": t, "run_name": n}
        for r, m, b, c, n, t in names
    ]
    table = runs_table(uri, args.experiment, evaluations, COLUMNS)
    run_ids = table.get("run_id")
    table = table.drop(columns=["run_id"], errors="ignore")
    print_table(table)
    errors = [abs(e) for e in table.get("prediction_error_pct", []) if e == e]
    print_errors_with_intervals(table)
    summarise("every evaluation", table, args.threads)
    if args.repeats > 1 and errors:
        medians = median_over_repeats(table)
        print(f"\nmedian over {args.repeats} repeats (predicted and measured each the median of its repeats):")
        print_table(medians)
        summarise("medians over repeats", medians, args.threads)
    if "machine_drift_pct" in table and errors:
        from dlbench.operators.reference import DRIFT_LIMIT_PCT

        steady = table[table["machine_drift_pct"].abs() <= DRIFT_LIMIT_PCT]
        summarise(f"evaluations whose reference kernels moved <= {DRIFT_LIMIT_PCT:g}%", steady, args.threads)
    if run_ids is not None and run_ids.notna().any():
        ratios = op_type_ratios(uri, args.experiment, table.assign(run_id=run_ids).dropna(subset=["run_id"]))
        print_op_type_ratios(ratios)
    if args.out:
        table.to_csv(args.out, index=False)
    return 0 if len(errors) == len(names) else 1


def summarise(what: str, table, threads: int) -> None:
    """The mean and max |error| of ``table``, per cache state of the benchmarks."""
    for caches in sorted(set(table.get("caches", []))):
        part = table[table["caches"] == caches]
        errors = [abs(e) for e in part.get("prediction_error_pct", []) if e == e]
        if not errors:
            print(f"|prediction error| of {what}, caches={caches}: none")
            continue
        print(
            f"|prediction error| of {what}, caches={caches}: mean {statistics.fmean(errors):.1f}%, max "
            f"{max(errors):.1f}% over {len(errors)} (aim: <= 10% each, <= 5% on average); threads={threads}"
        )


def print_errors_with_intervals(table) -> None:
    """Every evaluation's error with its 95% interval over the paired rounds, and the widest interval."""
    from dlbench.analysis.step_interval import error_text

    print("\nprediction error with its 95% interval over each evaluation's paired rounds:")
    widest = 0.0
    for row in table.to_dict("records"):
        print(f"  {row['model']} bs{row['batch_size']} caches={row['caches']}: {error_text(row)}")
        low, high = row.get("prediction_error_lo_pct"), row.get("prediction_error_hi_pct")
        if low == low and high == high and low is not None and high is not None:
            widest = max(widest, (high - low) / 2.0)
    if widest:
        print(f"widest interval: +-{widest:.1f} points (aim on a quiet machine: none wider than +-8)")


#: op types above this share of the profiled step are held to the ratio band
RATIO_SHARE_PCT, RATIO_BAND = 5.0, (0.8, 1.25)


def op_type_ratios(uri: str, experiment: str, table):
    """Per evaluation and op type: the training/benchmark ratio (``op_types.csv``: time in the profiled step
    over the benchmark terms) and the op type's share of the profiled step."""
    import tempfile

    import pandas as pd

    from dlbench.tracking.store import download_artifact, resolve_tracking

    target = resolve_tracking(uri, experiment)
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in table.to_dict("records"):
            try:
                path = download_artifact(target, row["run_id"], "op_types.csv", Path(tmp) / row["run_id"])
            except Exception as err:  # noqa: BLE001 - a failed evaluation has no table; say so, go on
                print(f"  no op_types.csv for {row['model']} bs{row['batch_size']}: {err}")
                continue
            types = pd.read_csv(path)
            total = float(types["in_training_ms"].sum())
            types["share_pct"] = 100.0 * types["in_training_ms"] / total if total > 0 else float("nan")
            types["configuration"] = f"{row['model']} bs{row['batch_size']} {row['caches']}"
            parts.append(types[["configuration", "op_type", "share_pct", "ratio_training_to_benchmark"]])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def print_op_type_ratios(ratios) -> None:
    """The ratio per op type (rows) and configuration (columns), and the op types over 5% of a step whose
    ratio is outside 0.8-1.25."""
    if ratios.empty:
        return
    wide = ratios.pivot_table(index="op_type", columns="configuration", values="ratio_training_to_benchmark")
    print("\ntraining/benchmark ratio per op type (time in the profiled step / benchmark terms):")
    print_table(wide.reset_index())
    low, high = RATIO_BAND
    far = ratios[(ratios["share_pct"] > RATIO_SHARE_PCT)
                 & ~ratios["ratio_training_to_benchmark"].between(low, high)]  # fmt: skip
    if far.empty:
        print(f"every op type over {RATIO_SHARE_PCT:g}% of a step is within {low}-{high}")
    for r in far.itertuples(index=False):
        print(f"  {r.configuration}: {r.op_type} ({r.share_pct:.0f}% of the step) ratio "
              f"{r.ratio_training_to_benchmark:.2f}, outside {low}-{high}")  # fmt: skip


def median_over_repeats(table):
    """Per configuration: the median predicted and the median measured step over the repeats, and the error
    of those two medians."""
    ok = table.dropna(subset=["step_time_predicted_ms", "step_time_measured_ms"])
    grouped = ok.groupby(["model", "batch_size", "caches"], sort=False)
    frame = grouped.agg(
        repeats=("repeat", "count"),
        step_time_predicted_ms=("step_time_predicted_ms", "median"),
        step_time_measured_ms=("step_time_measured_ms", "median"),
        machine_drift_pct=("machine_drift_pct", "median"),
    ).reset_index()
    frame["prediction_error_pct"] = (frame["step_time_predicted_ms"] / frame["step_time_measured_ms"] - 1) * 100
    return frame


if __name__ == "__main__":
    sys.exit(main())
