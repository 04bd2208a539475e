"""Do the embedded kernels measure the same in a forked worker (warm start) as in a new worker process?

Runs one operator sweep alternately without (``cold``: the worker is a new interpreter that imports torch)
and with a warm-start server (``warm``: the worker is a fork of the command, itself a fork of the server),
``--rounds`` times each, in one store, and compares each operation's median time: the warm/cold ratio of
the medians over the rounds, against the spread between cold rounds alone (what the machine's own drift
gives). Threads default to 1 so that the two cores of a small machine do not make every figure noise.

Usage: python bench/warm_kernels.py [--benchmark conv] [--rounds 3] [--threads 1] [--out warm_kernels.csv]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def load_average() -> str:
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


def newest_output(work: Path) -> pd.DataFrame:
    runs = sorted((work / ".dlbench" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    (out,) = [p for p in (runs[-1] / "protocol").glob("*_out.csv")]
    return pd.read_csv(out)[["id", "ms"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", default="conv")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    print(f"before: {load_average()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlbench_warm_kernels_") as tmp:
        work = Path(tmp)
        modes = {"cold": {**env, "DLBENCH_WARM": "0"},
                 "warm": {**env, "DLBENCH_WARM": "1", "DLBENCH_WARM_DIR": str(work / "warm")}}  # fmt: skip
        server = [sys.executable, "-m", "dlbench.cli.warmstart"]
        subprocess.run([*server, "start"], cwd=work, env=modes["warm"], check=True, capture_output=True)  # noqa: S603
        command = [sys.executable, "-m", "dlbench", f"+benchmark={args.benchmark}", f"threads={args.threads}",
                   f"batch_size={args.batch_size}", "quiet=true"]  # fmt: skip
        try:
            for round_number in range(args.rounds):
                for mode, mode_env in modes.items():
                    done = subprocess.run(command, cwd=work, env=mode_env, capture_output=True, text=True)  # noqa: S603
                    if done.returncode:
                        raise SystemExit(f"{mode} sweep failed:\n{done.stderr[-2000:]}")
                    rows.append(newest_output(work).assign(mode=mode, round=round_number))
                    print(f"round {round_number} {mode}: done ({load_average()})", flush=True)
        finally:
            subprocess.run([*server, "stop"], cwd=work, env=modes["warm"], capture_output=True, check=False)  # noqa: S603
    frame = pd.concat(rows, ignore_index=True)
    medians = frame.pivot_table(index="id", columns="mode", values="ms", aggfunc="median")
    ratio = medians["warm"] / medians["cold"]
    cold = frame[frame["mode"] == "cold"].pivot_table(index="id", columns="round", values="ms")
    cold_spread = cold.max(axis=1) / cold.min(axis=1)
    summary = pd.DataFrame({"cold_ms": medians["cold"], "warm_ms": medians["warm"], "warm/cold": ratio,
                            "cold max/min over rounds": cold_spread})  # fmt: skip
    with pd.option_context("display.width", 160):
        print(summary.to_string(float_format=lambda v: f"{v:.3f}"))
    geomean = np.exp(np.log(ratio).mean())
    print(f"\nwarm/cold: geometric mean {geomean:.3f}, min {ratio.min():.3f}, max {ratio.max():.3f} over "
          f"{len(ratio)} operations; cold rounds among themselves: median max/min {cold_spread.median():.3f}, "
          f"max {cold_spread.max():.3f}")  # fmt: skip
    print(f"after: {load_average()} ({os.cpu_count()} CPUs)")
    if args.out:
        frame.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
