"""The GPU timeline model replayed on recorded evaluations: each evaluation's profiled step (its
``profile/batch_*_trace.json``) is fed to :mod:`dlbench.analysis.timeline` with the trace's own host and
device durations, and the replayed step is set against the traced one. This checks the model's structure
(program-order host lane, per-stream device lane, synchronising calls joining them), not a prediction: the
times come from the run itself, so it is a test oracle, never an input. It also checks that the operator
table counts every kernel's device time exactly once.

    python bench/gpu_replay.py ../shared/data/h200/evaluations

Last line: ``replay: mean |error| X%, max Y% over N evaluations; device time attributed once: Z% of kernel
time`` (Z: device time in the table's operator rows over the device time in the traces; 100 when every
kernel, memcpy and memset is counted once for the operator that launched it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlbench.analysis.timeline import lane_breakdown, replay_ops, simulate  # noqa: E402
from dlbench.training.profile import UNLAUNCHED, operator_table  # noqa: E402
from dlbench.training.trace import DEVICE, read_trace  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of recorded evaluations (<run>/profile/*_trace.json)")
    args = parser.parse_args(argv)
    traces = sorted(args.folder.glob("*/profile/batch_*_trace.json"))
    if not traces:
        print(f"{args.folder}: no <run>/profile/batch_*_trace.json traces; pass a folder of recorded evaluations",
              file=sys.stderr)  # fmt: skip
        return 2
    errors: list[float] = []
    kernel_us = attributed_us = 0.0
    header = f"{'evaluation':54s} {'traced ms':>9s} {'replayed':>9s} {'error':>7s}"
    print(f"{header}  device busy/idle, host in operators/waiting/outside")
    for path in traces:
        try:
            events = read_trace(path)
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
        replay = replay_ops(events)
        timeline = simulate(replay.ops)
        error = 100.0 * (timeline.step_us - replay.traced_step_us) / replay.traced_step_us
        errors.append(error)
        lanes = lane_breakdown(events)
        rows = operator_table(events, 0)
        kernel_us += sum(e.duration for e in events if e.kind == DEVICE) / 1e3
        attributed_us += sum(r[6] for r in rows if not r[1].startswith(UNLAUNCHED))
        name = f"{path.parent.parent.name}/{path.stem.removesuffix('_trace')}"
        print(f"{name:54s} {replay.traced_step_us / 1e3:9.3f} {timeline.step_us / 1e3:9.3f} {error:+6.2f}%  "
              f"{lanes['device_busy_ms']:.2f}/{lanes['device_idle_ms']:.2f}, {lanes['host_operators_ms']:.2f}/"
              f"{lanes['host_waiting_ms']:.2f}/{lanes['host_outside_ms']:.2f} ms")  # fmt: skip
    share = 100.0 * attributed_us / kernel_us if kernel_us else float("nan")
    mean = sum(abs(e) for e in errors) / len(errors)
    print(f"replay: mean |error| {mean:.2f}%, max {max(abs(e) for e in errors):.2f}% over {len(errors)} evaluations; "
          f"device time attributed once: {share:.1f}% of kernel time")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
