"""What the training instrumentation costs: N ResNet training steps with it (profiling K of them) over the
same N steps without it, alternating the two in one process to cancel drifts of a shared machine.

    python bench/instrument_overhead.py --steps 50 --repeats 3 --threads 2

Reports the total-time ratio (aim: <= 1.05), how much slower a profiled batch is than an unprofiled one,
and the cost of the context manager on a batch it does not profile. On a shared machine the run totals
drift by more than the overhead, so it also estimates the ratio from per-batch figures: the time spent
outside the steps (profiler start/stop, tables, trace, summary, finish) plus the extra time of the
profiled steps, over N median steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from dlbench import PROJECT_ROOT
from dlbench.training.instrument import ProfileSession, ProfileSettings

sys.path.insert(0, str(PROJECT_ROOT / "TrainingBenchmarks"))
from resnet_cifar import ResNetCifar, synthetic_cifar  # noqa: E402


def train(steps: int, batch_size: int, width: int, session: ProfileSession | None) -> tuple[float, float, float]:
    """Wall seconds for ``steps`` training steps, each wrapped in ``session.batch`` when a session is given;
    the seconds the instrumentation spent outside the timed steps (entering, leaving, writing, finishing);
    and the process CPU seconds (less sensitive to other processes on the machine at one thread)."""
    torch.manual_seed(0)
    model = ResNetCifar(width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = synthetic_cifar(4, batch_size, torch.device("cpu"), seed=0)
    outside = 0.0
    cpu_start = time.process_time()
    start = time.perf_counter()
    for batch_idx in range(steps):
        inputs, targets = data[batch_idx % len(data)]
        if session is None:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            loss.item()
        else:
            block_start = time.perf_counter()
            with session.batch(batch_idx) as batch:
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.step()
                batch.log(loss=loss.item(), samples=batch_size)
            outside += time.perf_counter() - block_start - batch.wall_s
    if session is not None:
        finish_start = time.perf_counter()
        session.finish()
        outside += time.perf_counter() - finish_start
    return time.perf_counter() - start, outside, time.process_time() - cpu_start


def unprofiled_batch_cost_us(calls: int = 100_000) -> float:
    """Microseconds the context manager adds to a batch it does not profile."""
    with tempfile.TemporaryDirectory() as tmp:
        session = ProfileSession(ProfileSettings(warmup=0, batches=0, out_dir=Path(tmp)))
        start = time.perf_counter()
        for i in range(calls):
            with session.batch(i):
                pass
        wrapped = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(calls):
        pass
    bare = time.perf_counter() - start
    return (wrapped - bare) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="training steps per timed run (N)")
    parser.add_argument("--profiled", type=int, default=3, help="profiled batches per instrumented run (K)")
    parser.add_argument("--warmup", type=int, default=5, help="batches before the first profiled one")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of (plain, instrumented) runs")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=16, help="ResNet width (16: the benchmark default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    train(3, args.batch_size, args.width, None)  # warm the allocator and oneDNN caches once
    plain, instrumented, profiled_s, unprofiled_s, outside_s = [], [], [], [], []
    plain_cpu, instrumented_cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = ("plain", "instrumented") if repeat % 2 == 0 else ("instrumented", "plain")
            for mode in order:
                if mode == "plain":
                    seconds, _, cpu = train(args.steps, args.batch_size, args.width, None)
                    plain.append(seconds)
                    plain_cpu.append(cpu)
                    continue
                settings = ProfileSettings(args.warmup, args.profiled, Path(tmp) / f"run{repeat}")
                session = ProfileSession(settings)
                seconds, outside, cpu = train(args.steps, args.batch_size, args.width, session)
                instrumented.append(seconds)
                instrumented_cpu.append(cpu)
                outside_s.append(outside)
                profiled_s.extend(session.step_times(profiled=True))
                unprofiled_s.extend(session.step_times(profiled=False)[args.warmup :])
            print(
                f"repeat {repeat}: plain {plain[-1]:.3f} s, instrumented {instrumented[-1]:.3f} s, "
                f"ratio {instrumented[-1] / plain[-1]:.3f}",
                flush=True,
            )
    step_s = statistics.median(unprofiled_s)
    # Noise-robust accounting: what the instrumentation adds, from per-batch medians rather than run totals.
    added_s = statistics.median(outside_s) + sum(p - step_s for p in profiled_s) / args.repeats
    figures = {
        "steps": args.steps,
        "profiled_batches": args.profiled,
        "repeats": args.repeats,
        "threads": args.threads,
        "plain_s_median": statistics.median(plain),
        "instrumented_s_median": statistics.median(instrumented),
        "total_ratio_median": statistics.median(i / p for i, p in zip(instrumented, plain, strict=True)),
        "total_ratio_of_sums": sum(instrumented) / sum(plain),
        "total_ratio_of_minima": min(instrumented) / min(plain),  # the least disturbed run of each
        "cpu_time_ratio_of_sums": sum(instrumented_cpu) / sum(plain_cpu),
        "profiled_batch_s_median": statistics.median(profiled_s),
        "unprofiled_batch_s_median": statistics.median(unprofiled_s),
        "profiled_batch_slowdown": statistics.median(profiled_s) / step_s,
        "instrumentation_outside_steps_s_median": statistics.median(outside_s),
        "added_s_estimate": added_s,
        "ratio_estimate_from_batches": 1 + added_s / (args.steps * step_s),
        "unprofiled_batch_cost_us": unprofiled_batch_cost_us(),
    }
    for key, value in figures.items():
        print(f"{key:28s} {value:.4g}" if isinstance(value, float) else f"{key:28s} {value}")
    if args.output:
        args.output.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
