"""An operator benchmark executable (the CSV protocol) that times ReLU (numpy) on each row's problem, each timed
call of the even ids running it ``factor`` times (rounded): a sweep with a known slowdown on a known half of its
operations, on the same problems (problems made larger instead would change what the next operation finds in the
caches: a run timed an odd id 1.25x faster after its even neighbour grew 8 times). Each row carries its CPU
efficiency, so a sweep another process slowed is marked contended.
Usage: ``python scaled_relu.py FACTOR INPUT.csv``; writes ``INPUT_out.csv`` and ``INPUT_samples.csv``."""

import os
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    factor, path = float(sys.argv[1]), Path(sys.argv[-1])
    warmup = int(os.environ.get("DLBENCH_WARMUP", "2"))
    reps = max(int(os.environ.get("DLBENCH_MIN_REPS", "10")), 5)
    rows = [line.split(",") for line in path.read_text().split() if line]
    samples = ["id,ms"]
    with path.with_name(f"{path.stem}_out.csv").open("w") as out:
        out.write("id,ms,cpu_efficiency\n")  # the header before measuring, each row as it is measured
        out.flush()
        for row in rows:
            op_id = int(row[0])
            n, c, h, w = (int(float(v)) for v in row[1:5])
            repeats = max(round(factor), 1) if op_id % 2 == 0 else 1
            x = np.random.default_rng(op_id).standard_normal(n * c * h * w, dtype=np.float32)
            y = np.empty_like(x)
            times = []
            for i in range(warmup + reps):
                if i == warmup:
                    cpu, wall = time.process_time(), time.perf_counter()
                start = time.perf_counter()
                for _ in range(repeats):
                    np.maximum(x, 0.0, out=y)
                if i >= warmup:
                    times.append((time.perf_counter() - start) * 1e3)
            # this process's CPU time over the wall time of its timed calls: below 1, another process held the core
            efficiency = min((time.process_time() - cpu) / (time.perf_counter() - wall), 1.0)
            out.write(f"{op_id},{float(np.median(times)):.7g},{efficiency:.4f}\n")
            out.flush()
            samples += [f"{op_id},{t:.7g}" for t in times]
    path.with_name(f"{path.stem}_samples.csv").write_text("\n".join(samples) + "\n")


if __name__ == "__main__":
    main()
