"""Does a number measured while the cores were taken ever read ``ok``? (issue 27's target)

Runs the same sweep twice into a fresh store: first with ``--burners`` CPU burners (``python -c 'while 1:
pass'``) on the machine's cores, then, right after they are stopped, on the quiet machine. Prints one row per
operation (busy median, status and cpu efficiency; quiet median and status; busy / quiet), then the count of
operations reported ``ok`` under load that are off by more than ``--limit`` (1.5x) from their quiet median
(target: 0), and the ones marked ``contended``. The load average is printed with each sweep.

    python bench/contention.py                          # +benchmark=conv batch_size=1 threads=2, 3 burners
    python bench/contention.py --burners 0              # two quiet sweeps: nothing should be contended
    python bench/contention.py -- measure.max_time_s=0.1   # extra overrides for both sweeps
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def sweep(store: Path, label: str, overrides: list[str]) -> pd.DataFrame:
    """One dlbench sweep into ``store``; its results.csv."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "dlbench", *overrides, "quiet=true", f"mlflow.run_name={label}"]
    print(f"{label}: {' '.join(command[1:])}; {load()}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=store, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    print(f"{label}: {time.perf_counter() - started:.1f} s, exit {done.returncode}; {load()}", flush=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"attributes.run_name = '{label}'"
    )
    if not runs:
        raise SystemExit(f"{label}: no run named {label} in {store}:\n{done.stderr[-3000:]}")
    path = client.download_artifacts(runs[0].info.run_id, "results.csv", str(store))
    return pd.read_csv(io.StringIO(Path(path).read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", default="conv")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--burners", type=int, default=3)
    parser.add_argument("--limit", type=float, default=1.5, help="an ok operation off by more than this is wrong")
    parser.add_argument("overrides", nargs="*", help="more overrides for both sweeps (after --)")
    args = parser.parse_args(argv)
    overrides = [f"+benchmark={args.benchmark}", f"batch_size={args.batch}", f"threads={args.threads}"]
    overrides += args.overrides
    with tempfile.TemporaryDirectory(prefix="contention_") as tmp:
        store = Path(tmp)
        burners = [
            subprocess.Popen([sys.executable, "-c", "while 1: pass"])  # noqa: S603
            for _ in range(args.burners)
        ]
        try:
            time.sleep(1.0 if burners else 0.0)
            busy = sweep(store, f"busy_{args.burners}_burners", overrides)
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        quiet = sweep(store, "quiet", overrides)
    table = busy[["name", "median_ms", "status", "cpu_efficiency"]].merge(
        quiet[["name", "median_ms", "status", "cpu_efficiency"]], on="name", suffixes=("_busy", "_quiet")
    )
    table["busy_over_quiet"] = table["median_ms_busy"] / table["median_ms_quiet"]
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="NA"))
    ok = table[table["status_busy"] == "ok"]
    off = ok[(ok["busy_over_quiet"] > args.limit) | (ok["busy_over_quiet"] < 1 / args.limit)]
    contended = table[table["status_busy"] == "contended"]
    quiet_contended = table[table["status_quiet"] == "contended"]
    print(
        f"\nunder {args.burners} burners: {len(ok)} ok, {len(off)} of them off by more than {args.limit}x from the "
        f"quiet median (target 0){': ' + ', '.join(off['name']) if len(off) else ''}"
    )
    print(f"contended under load: {len(contended)}: {', '.join(contended['name'])}")
    print(f"contended in the quiet run: {len(quiet_contended)}: {', '.join(quiet_contended['name'])}; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
