"""A/B of dlbench's conv timing against torch.utils.benchmark's hot loop, in one process, interleaved: where
could a systematic gap between the two come from (issue 28: one convolution at 0.78)?

Per round, in a new shuffled order, every chosen convolution is timed by every variant; a variant's figure is
its median over the rounds of (variant / Timer in the same round), so the machine's drift between rounds
cancels and a systematic difference of a few percent shows through a loaded machine's noise. Variants:

- ``dlbench``: what the embedded torch kernel does for a row in a sweep's first round: the heap trimmed
  (``release_free_heap``), the row's tensors built by the backend's own ``Conv`` kernel, ``time_repeated``
  with warm-up 3, min_reps 10, min_time 0.2 s, target_rel_ci 0.02, max_time 1 s, per-call median;
- ``dlbench_round``: a round's share at 4 rounds (warm-up 3, min_reps 3, 0.05-0.25 s);
- ``dlbench_round_w1``: the same with one warm-up call, as the rounds after the first had before;
- ``dlbench_cold``: ``measure.caches=cold`` (calls rotate over copies filling twice the last-level cache);
- ``timer_fn``: ``Timer.adaptive_autorange`` (threshold 0.02, 0.2-1 s) on the backend's own callable;
- ``timer``: the same on ``F.conv2d`` of fresh tensors, as ``bench/repeatability.py`` times it (the reference).

The process runs with the allocator settings and thread count dlbench's kernels get (re-executing itself with
them). The load average is printed before and after; compare ratios within one run and repeat. On a busy
machine, ``--cpu-time`` times both sides by this process's CPU time instead of the wall clock (at
``--threads 1`` a preempted call then costs what it computed, not what it waited; with more threads a
spinning thread's wait counts as CPU time): a difference in what the kernel does still shows.

    python bench/timing_ab.py --layers l3_3x3_s2,l3_3x3,l1_reduce_in --rounds 6 --threads 2
    python bench/timing_ab.py --rounds 6 --threads 1 --cpu-time     # on a loaded machine
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from dlbench.core.allocator import allocator_environment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="l3_3x3_s2,l3_3x3,l2_3x3_s2,l1_reduce_in")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cpu-time", action="store_true", help="time by this process's CPU time")
    args = parser.parse_args(argv)
    wanted = {**allocator_environment(keep_heap=True), "OMP_NUM_THREADS": str(args.threads)}
    if any(os.environ.get(k) != v for k, v in wanted.items()):  # the C library reads GLIBC_TUNABLES at start-up
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], {**os.environ, **wanted})
    import torch
    from repeatability import conv_callable, load, resnet50_convolutions
    from torch.utils import benchmark

    from dlbench.backends.timing import HostClock, TimingSettings, time_repeated
    from dlbench.backends.torch.kernels import KERNELS
    from dlbench.backends.torch.memory import tensor_bytes
    from dlbench.backends.torch.rotation import cold_footprint, copies_for, rotated
    from dlbench.core.allocator import release_free_heap

    torch.set_num_threads(args.threads)
    cpu, f32 = torch.device("cpu"), torch.float32
    by_name = {op.name: op for op in resnet50_convolutions(args.batch)}
    layers = [by_name[name] for name in args.layers.split(",")]

    class CpuClock(HostClock):
        def time_call(self, fn) -> None:
            start = time.process_time_ns()
            fn()
            self._samples.append((time.process_time_ns() - start) / 1e6)

    def dlbench(op, settings: TimingSettings, cold: bool = False) -> float:
        release_free_heap()
        copies = copies_for(tensor_bytes("Conv", op.param_dict, 4), cold_footprint("cold" if cold else "hot", cpu))
        fn = rotated(lambda: KERNELS["Conv"](op.param_dict, cpu, f32), copies)
        return time_repeated(fn, settings, clock=CpuClock() if args.cpu_time else None).stats.median_ms

    def timer(fn) -> float:
        clock = {"timer": time.process_time} if args.cpu_time else {}
        t = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=args.threads, **clock)
        return t.adaptive_autorange(threshold=0.02, min_run_time=0.2, max_run_time=1.0).median * 1e3

    first = TimingSettings(warmup=3, min_reps=10, min_time_s=0.2, target_rel_ci=0.02, max_time_s=1.0)
    later = TimingSettings(warmup=3, min_reps=3, min_time_s=0.05, target_rel_ci=0.02, max_time_s=0.25)
    later_w1 = TimingSettings(warmup=1, min_reps=3, min_time_s=0.05, target_rel_ci=0.02, max_time_s=0.25)
    variants = {
        "dlbench": lambda op: dlbench(op, first),
        "dlbench_round": lambda op: dlbench(op, later),
        "dlbench_round_w1": lambda op: dlbench(op, later_w1),
        "dlbench_cold": lambda op: dlbench(op, first, cold=True),
        "timer_fn": lambda op: timer(KERNELS["Conv"](op.param_dict, cpu, f32)),
        "timer": lambda op: timer(conv_callable(op)),
    }
    clock = "this process's CPU time" if args.cpu_time else "the wall clock"
    print(f"{len(layers)} convolutions, batch {args.batch}, threads {args.threads}, {args.rounds} rounds, timed by "
          f"{clock}; before: {load()}", flush=True)  # fmt: skip
    ms: dict[tuple[str, str], list[float]] = {(op.name, v): [] for op in layers for v in variants}
    with torch.no_grad():
        for _ in range(args.rounds):
            jobs = [(op, v) for op in layers for v in variants]
            for op, v in random.sample(jobs, len(jobs)):
                ms[(op.name, v)].append(variants[v](op))
            print(f"  round done; {load()}", flush=True)
    print(f"{'layer':<14}" + "".join(f"{v:>22}" for v in variants) + "   (median over rounds of variant / timer)")
    for op in layers:
        cells = []
        for v in variants:
            ratios = sorted(a / b for a, b in zip(ms[(op.name, v)], ms[(op.name, "timer")], strict=True))
            cells.append(f"{statistics.median(ratios):.3f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]")
        print(f"{op.name:<14}" + "".join(f"{c:>22}" for c in cells))
        print(f"{'  timer ms':<14}" + " ".join(f"{t:.3g}" for t in ms[(op.name, "timer")]))
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
