"""Repeatability of dlbench's timings, and their agreement with ``torch.utils.benchmark`` (issue 28's targets).

On the distinct ResNet-50 convolutions (``conf/benchmark/conv.yaml``), through the embedded torch backend and
the executable protocol, exactly as a sweep measures them (``measure_operations``: ``measure.rounds``
interleaved rounds, the reference probe, the interference watch, the contention check and the convergence rule
of ``measure.target_rel_ci``):

1. **Two identical sweeps agree**, back to back: per operation ln(median_1 / median_2); the common drift (the
   median of those over the operations) is removed, and the target is on what is left: the median over the
   operations of |ln ratio - common drift| within ln(1.03) (3%), at load up to 1.5. Printed beside it: each
   sweep's reference probe ``machine_drift_pct``, and the spread the medians' own sampling error alone would
   give (per operation 0.674 x sqrt(se_1^2 + se_2^2), se = the 95% interval's half-width / 1.96, median over
   the operations): a spread near it is sampling noise, which only more repetitions reduce; a spread well
   above it is drift or interference that the rounds did not spread.
2. **dlbench agrees with torch.utils.benchmark** (``Timer.adaptive_autorange``, threshold 0.02, same thread
   count, same shapes, ``F.conv2d`` on NCHW float32 tensors as the torch backend calls it, in a process of its
   own started with the allocator settings dlbench's kernels get, ``dlbench.core.allocator``): per convolution
   dlbench / torch; target: every one within 0.85-1.15 (and the median |ln ratio| within 10%).

   **Timed in the same rounds.** The machine's speed moves by ~10% within a minute here, so a Timer block run
   after the sweeps (this script's first version) compared measurements taken a minute apart and put that
   drift in the ratio. Now the Timer process times every convolution in each round of both sweeps, next to
   dlbench's round (``measure_operations(around_round=...)``), ABBA: after dlbench's round in even rounds,
   before it in odd ones, so that over a pair of rounds neither side sits systematically earlier; its
   order is shuffled anew each round as dlbench's is, and each Timer share is dlbench's share of a round
   (``--min-run-time`` and ``--max-time`` divided by the rounds). Three ratios per convolution are printed,
   none hidden:

   - ``ratio_raw``: dlbench's median (geometric mean of the two sweeps) over the median of every time the
     Timer took in those rounds (its block means); the targets' verdict is on this one;
   - ``ratio_paired`` (drift-corrected): the median over rounds of dlbench's round median over the Timer's
     median in the same round (minutes of drift cancel; rounds dlbench set aside as contended are left out);
   - ``ratio_blocked`` (the statistic's part): dlbench's own per-call samples put in blocks of the Timer's
     calls per block, the median of the block means over the Timer's median: the same statistic on both
     sides, so what is left between ``ratio_raw`` and it is the statistic (per-call median against the median
     of block means), not the kernel's timing;
   - ``ratio_separate``: the first version's figure, a Timer block after both sweeps (Timer defaults, up to
     10 s per convolution), for comparison; ``--no-separate-block`` skips it.

The load average is printed before, between and after the sweeps, and each sweep says whether dlbench judged
the machine noisy; figures from a busy machine are not the targets' test (re-measure on a quiet one). Under
load the two disagree for a known reason: torch.utils.benchmark takes the median of block means (10 or more
calls per block for a short kernel), and a preemption anywhere in a block inflates it, while dlbench's per-call
median skips preempted calls and sets aside rounds whose threads waited for cores.

    python bench/repeatability.py                       # batch 4, threads 2 (issue 28)
    python bench/repeatability.py --batch 1 --threads 1 --rounds 1 --limit 3 --output /tmp/r.csv
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.core.allocator import allocator_environment  # noqa: E402
from dlbench.core.descriptors import DESCRIPTORS, operation_cost  # noqa: E402
from dlbench.core.settings import default  # noqa: E402
from dlbench.core.values import Operation  # noqa: E402
from dlbench.operators.reference import reference_benchmarks  # noqa: E402
from dlbench.operators.registry import load_registry  # noqa: E402
from dlbench.operators.rounds import round_orders  # noqa: E402
from dlbench.operators.runner import RunSettings, measure_operations, round_files  # noqa: E402

CONV_YAML = REPO / "conf" / "benchmark" / "conv.yaml"
SAME_SWEEP_TARGET = math.log(1.03)
TORCH_BENCHMARK_TARGET = math.log(1.10)
#: every convolution's dlbench / torch.utils.benchmark within this range
TORCH_RATIO_RANGE = (0.85, 1.15)


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def resnet50_convolutions(batch: int) -> list[Operation]:
    """The layers of conf/benchmark/conv.yaml with N set to ``batch``, as operations in canonical order."""
    config = yaml.safe_load(CONV_YAML.read_text(encoding="utf-8"))
    common = {k: v for k, v in config.get("common", {}).items() if k != "N"}
    operations = []
    for i, layer in enumerate(config["operations"]):
        params = {**common, **{k: v for k, v in layer.items() if k not in ("name", "count")}, "N": batch}
        values = tuple((d, int(params[d])) for d in DESCRIPTORS["Conv"])
        flops, moved = operation_cost("Conv", dict(values))
        operations.append(Operation(id=i, op_type="Conv", params=values, name=str(layer["name"]), flops=flops))
    return operations


@dataclass
class Sweep:
    """One sweep's figures per operation id: median, its 95% interval's relative half-width, and the median and
    the samples (in the order they were taken) of each round dlbench kept, by round index."""

    median_ms: dict[int, float]
    rel_ci: dict[int, float]
    rounds_ms: dict[int, dict[int, float]]
    samples: dict[int, dict[int, list[float]]]


def kept_round_medians(rounds_csv: Path | None) -> dict[int, dict[int, float]]:
    """From a sweep's ``_rounds.csv``: per operation, the median of each round that was kept."""
    if rounds_csv is None or not rounds_csv.exists():
        return {}
    table = pd.read_csv(rounds_csv, comment="#", dtype={"round": str})
    out: dict[int, dict[int, float]] = {}
    for row in table[(table["kept"] == 1) & (table["round"] != "again")].itertuples():
        out.setdefault(int(row.id), {})[int(row.round) - 1] = float(row.median_ms)
    return out


def sweep(operations: list[Operation], settings: RunSettings, workdir: Path, stem: str, around) -> Sweep:
    """The sweep's figures, as a dlbench sweep measures them; prints the machine's state."""
    registry = load_registry()
    entry = registry.operator("torch_conv")
    probe = reference_benchmarks(registry, "cpu")
    result, files = measure_operations(
        entry, operations, settings, workdir, stem=stem, probe=probe, around_round=around
    )
    if not result.ok:
        raise SystemExit(f"{stem}: {result.run_error or [m.error for m in result.measurements.values() if m.error]}")
    report = result.interference
    noisy = f"noisy: {report.reason}" if report is not None and report.noisy else "quiet by dlbench's judgement"
    flagged = {
        status: [op.name for op in operations if result.measurements[op.id].status == status]
        for status in ("unstable", "contended")
    }
    drift = result.extra.get("drift_metrics", {}).get("machine_drift_pct", math.nan)
    print(
        f"{stem}: {noisy}; {len(flagged['unstable'])} unstable {flagged['unstable']}; {len(flagged['contended'])} "
        f"contended {flagged['contended']}; probe machine_drift_pct {drift:+.1f}%; {load()}",
        flush=True,
    )
    stats = {i: m.stats for i, m in result.measurements.items() if m.stats is not None}
    kept = kept_round_medians(files.rounds_csv)
    samples: dict[int, dict[int, list[float]]] = {}
    for k in range(int(result.extra.get("rounds", 1))):
        path = round_files(workdir, stem, k, int(result.extra.get("rounds", 1))).samples_csv
        table = pd.read_csv(path) if path is not None and path.exists() else pd.DataFrame(columns=["id", "ms"])
        for op_id, group in table.groupby("id"):
            if k in kept.get(int(op_id), {}):
                samples.setdefault(int(op_id), {})[k] = list(group["ms"])
    return Sweep(
        {i: st.median_ms for i, st in stats.items()},
        {i: st.rel_ci if st.rel_ci is not None else math.nan for i, st in stats.items()},
        kept,
        samples,
    )


def conv_callable(op: Operation):
    """``F.conv2d`` of the operation's shapes on fresh NCHW float32 tensors (as the torch backend calls it)."""
    import torch
    import torch.nn.functional as F

    p = op.param_dict
    x = torch.randn(int(p["N"]), int(p["C"]), int(p["H"]), int(p["W"]))
    w = torch.randn(int(p["K"]), int(p["C"]) // int(p["group"]), int(p["kernel_shape_0"]), int(p["kernel_shape_1"]))
    stride, padding = (int(p["strides_0"]), int(p["strides_1"])), (int(p["pads_0"]), int(p["pads_1"]))
    dilation, groups = (int(p["dilations_0"]), int(p["dilations_1"])), int(p["group"])
    return lambda: F.conv2d(x, w, None, stride, padding, dilation, groups)


def timer_child(operations: list[Operation], threads: int) -> int:
    """The Timer process: per request (a JSON line: ids, min_run_time, max_run_time) every time
    ``Timer.adaptive_autorange`` took per call (its block means, ms) of each convolution and its calls per
    block, as one JSON line."""
    import torch
    from torch.utils import benchmark

    torch.set_num_threads(threads)
    by_id = {op.id: op for op in operations}
    for line in sys.stdin:
        request = json.loads(line)
        times = {}
        with torch.no_grad():
            for op_id in request["ids"]:
                timer = benchmark.Timer(stmt="fn()", globals={"fn": conv_callable(by_id[op_id])}, num_threads=threads)
                measured = timer.adaptive_autorange(
                    threshold=0.02, min_run_time=request["min_run_time"], max_run_time=request["max_run_time"]
                )
                times[op_id] = {"ms": [t * 1e3 for t in measured.times], "calls": measured.number_per_run}
        print(json.dumps(times), flush=True)
    return 0


class TimerProcess:
    """torch.utils.benchmark in a process of its own, with the allocator settings and thread count dlbench's
    kernels get (``GLIBC_TUNABLES`` is read by the C library at start-up only), serving requests."""

    def __init__(self, batch: int, threads: int, limit: int) -> None:
        env = {**os.environ, **allocator_environment(keep_heap=True), "OMP_NUM_THREADS": str(threads)}
        command = [sys.executable, __file__, "--timer-child", "--threads", str(threads), "--batch", str(batch),
                   "--limit", str(limit)]  # fmt: skip
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # noqa: S603

    def time(self, ids: list[int], min_run_time: float, max_run_time: float) -> dict[int, dict]:
        request = {"ids": ids, "min_run_time": min_run_time, "max_run_time": max_run_time}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the torch.utils.benchmark process ended (exit {self.proc.wait()})")
        return {int(k): v for k, v in json.loads(line).items()}

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


class TimerRounds:
    """The Timer's rounds next to dlbench's (``around_round``): after dlbench's round in even rounds, before it
    in odd ones, each in a new shuffled order; its times by operation and round."""

    def __init__(self, timer: TimerProcess, operations: list[Operation], rounds: int, min_run: float, max_run: float):
        self.timer, self.ids, self.rounds = timer, [op.id for op in operations], rounds
        self.share = (min_run / rounds, max_run / rounds)
        self.orders = round_orders(self.ids, rounds, random.Random())
        self.times: dict[int, dict[int, list[float]]] = {}
        self.calls: dict[int, list[int]] = {}  # the Timer's calls per block, per operation

    def __call__(self, index: int, stage: str) -> None:
        if stage != ("after" if index % 2 == 0 else "before"):
            return
        for op_id, measured in self.timer.time(self.orders[index], *self.share).items():
            self.times.setdefault(op_id, {})[index] = measured["ms"]
            self.calls.setdefault(op_id, []).append(measured["calls"])


def blocked_median(rounds: dict[int, list[float]], calls: int) -> float:
    """The Timer's statistic on dlbench's per-call samples: the median of the means of ``calls`` consecutive
    calls (each round's samples in the order taken; a round shorter than a block is one block)."""
    means = []
    for samples in rounds.values():
        blocks = [samples[i : i + calls] for i in range(0, len(samples) - calls + 1, calls)] or [samples]
        means.extend(statistics.fmean(b) for b in blocks)
    return statistics.median(means) if means else math.nan


def log_median(values) -> float:
    return math.exp(statistics.median(math.log(v) for v in values))


def compare(operations, sweeps: list[Sweep], timed: list[TimerRounds], separate: dict[int, list[float]]):
    """The per-convolution table and the sweeps' common drift."""
    first, second = sweeps
    common = statistics.median(math.log(first.median_ms[op.id] / second.median_ms[op.id]) for op in operations)
    records = []
    for op in operations:
        a, b = first.median_ms[op.id], second.median_ms[op.id]
        dlbench_ms = math.sqrt(a * b)
        timer_ms = statistics.median(t for rounds in timed for ts in rounds.times[op.id].values() for t in ts)
        paired = [
            s.rounds_ms[op.id][k] / statistics.median(ts)
            for s, rounds in zip(sweeps, timed, strict=True)
            for k, ts in rounds.times[op.id].items()
            if k in s.rounds_ms.get(op.id, {})
        ]
        se = [r / 1.96 for r in (first.rel_ci[op.id], second.rel_ci[op.id])]
        calls = int(statistics.median(c for rounds in timed for c in rounds.calls[op.id]))
        blocked = math.sqrt(math.prod(blocked_median(s.samples.get(op.id, {}), calls) for s in sweeps))
        records.append({
            "layer": op.name, "sweep_1_ms": a, "sweep_2_ms": b, "spread_after_drift": abs(math.log(a / b) - common),
            "sampling_spread": 0.674 * math.hypot(*se), "timer_ms": timer_ms, "ratio_raw": dlbench_ms / timer_ms,
            "ratio_paired": log_median(paired) if paired else math.nan, "ratio_blocked": blocked / timer_ms,
            "ratio_separate": dlbench_ms / statistics.median(separate[op.id]) if op.id in separate else math.nan,
            "gflops_per_s": op.flops / (dlbench_ms * 1e6),
        })  # fmt: skip
    return pd.DataFrame.from_records(records), common


def verdict_on(table: pd.DataFrame, column: str, label: str) -> str:
    ratios = table[column].dropna()
    if ratios.empty:
        return f"{label}: not measured"
    low, high = TORCH_RATIO_RANGE
    outside = table[(table[column] < low) | (table[column] > high)]
    versus = statistics.median(abs(math.log(r)) for r in ratios)
    return (
        f"{label}: {ratios.min():.3f}-{ratios.max():.3f}; {len(outside)} of {len(ratios)} outside {low}-{high} "
        f"{list(outside['layer'])} -> {VERDICT[outside.empty]}; median |ln ratio| {100 * versus:.2f}% "
        f"(<= {100 * TORCH_BENCHMARK_TARGET:.2f}%) -> {VERDICT[versus <= TORCH_BENCHMARK_TARGET]}"
    )


VERDICT = {True: "met", False: "NOT met"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=int(default("rounds")), help="measure.rounds of the sweeps")
    parser.add_argument("--target-rel-ci", type=float, default=0.02, help="measure.target_rel_ci of the sweeps")
    parser.add_argument("--max-time", type=float, default=1.0, help="measure.max_time_s of the sweeps (and Timer)")
    parser.add_argument("--min-time", type=float, default=0.2, help="measure.min_time_s of the sweeps")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="torch.utils.benchmark seconds per conv")
    parser.add_argument("--limit", type=int, default=0, help="only the first N convolutions (0: all)")
    parser.add_argument("--no-separate-block", action="store_true", help="skip the Timer block after the sweeps")
    parser.add_argument("--output", type=Path, default=Path("repeatability.csv"))
    parser.add_argument("--timer-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    operations = resnet50_convolutions(args.batch)
    if args.limit:
        operations = operations[: args.limit]
    if args.timer_child:
        return timer_child(operations, args.threads)
    settings = RunSettings(
        warmup=3, min_reps=10, min_time_s=args.min_time, target_rel_ci=args.target_rel_ci, max_time_s=args.max_time,
        threads=args.threads, timeout_s=3600, rounds=args.rounds,
    )  # fmt: skip
    print(
        f"{len(operations)} ResNet-50 convolutions, batch {args.batch}, threads {args.threads}, {args.rounds} rounds, "
        f"torch.utils.benchmark timed in the same rounds; before: {load()}",
        flush=True,
    )
    timer = TimerProcess(args.batch, args.threads, args.limit)
    try:
        timed = [TimerRounds(timer, operations, args.rounds, args.min_run_time, args.max_time) for _ in range(2)]
        with tempfile.TemporaryDirectory(prefix="repeatability_") as tmp:
            sweeps = [sweep(operations, settings, Path(tmp), f"sweep_{k + 1}", timed[k]) for k in range(2)]
        separate = {}
        if not args.no_separate_block:
            block = timer.time([op.id for op in operations], args.min_run_time, 10.0)
            separate = {op_id: measured["ms"] for op_id, measured in block.items()}
            print(f"torch.utils.benchmark block after the sweeps done; {load()}", flush=True)
    finally:
        timer.close()
    table, common = compare(operations, sweeps, timed, separate)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output, index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    spread = statistics.median(table["spread_after_drift"])
    sampling = (
        statistics.median(table["sampling_spread"].dropna()) if table["sampling_spread"].notna().any() else math.nan
    )
    print(
        f"\ntwo identical sweeps: common drift {100 * (math.exp(common) - 1):+.2f}% (sweep 1 over sweep 2); "
        f"per-operation spread after it, median over {len(table)}: {100 * spread:.2f}% "
        f"(target <= {100 * SAME_SWEEP_TARGET:.2f}%) -> {VERDICT[spread <= SAME_SWEEP_TARGET]}; "
        f"expected from the medians' own sampling error: {100 * sampling:.2f}%"
    )
    print("dlbench / torch.utils.benchmark, " + verdict_on(table, "ratio_raw", "raw, timed in the same rounds"))
    print("dlbench / torch.utils.benchmark, " + verdict_on(table, "ratio_paired", "paired by round (drift-corrected)"))
    print(
        "dlbench / torch.utils.benchmark, "
        + verdict_on(table, "ratio_blocked", "dlbench's calls in the Timer's blocks")
    )
    print("dlbench / torch.utils.benchmark, " + verdict_on(table, "ratio_separate", "separate block after (old)"))
    print(f"after: {load()}; wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
