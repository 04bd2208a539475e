"""An operator benchmark executable (the CSV protocol) whose timed calls wait as much as they compute: each call
runs ReLU (numpy) on the row's problem, then sleeps as long as that took, the way a thread waits for a core that
other work holds. It reports its own CPU efficiency (CPU time over the wall time of its timed calls, about 0.5),
so every operation of a sweep it serves is marked contended. Usage: ``python waiting_relu.py INPUT.csv``."""

import os
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    path = Path(sys.argv[-1])
    warmup = int(os.environ.get("DLBENCH_WARMUP", "1"))
    reps = max(int(os.environ.get("DLBENCH_MIN_REPS", "5")), 3)
    rows = [line.split(",") for line in path.read_text().split() if line]
    samples = ["id,ms"]
    with path.with_name(f"{path.stem}_out.csv").open("w") as out:
        out.write("id,ms,cpu_efficiency\n")
        for row in rows:
            op_id = int(row[0])
            x = np.random.default_rng(op_id).standard_normal(int(np.prod([float(v) for v in row[1:5]])))
            times = []
            for i in range(warmup + reps):
                if i == warmup:
                    cpu, wall = time.process_time(), time.perf_counter()
                start = time.perf_counter()
                np.maximum(x, 0.0)
                time.sleep(max(time.perf_counter() - start, 1e-4))  # waiting as long as it computed
                if i >= warmup:
                    times.append((time.perf_counter() - start) * 1e3)
            efficiency = min((time.process_time() - cpu) / (time.perf_counter() - wall), 1.0)
            out.write(f"{op_id},{float(np.median(times)):.7g},{efficiency:.4f}\n")
            samples += [f"{op_id},{t:.7g}" for t in times]
    path.with_name(f"{path.stem}_samples.csv").write_text("\n".join(samples) + "\n")


if __name__ == "__main__":
    main()
