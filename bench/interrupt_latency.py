"""Seconds from Ctrl-C (or SIGTERM) to a clean exit of dlbench: the benchmark's process group stopped,
the MLflow run ended KILLED with its partial results. ``python bench/interrupt_latency.py [--repeats 3]``."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
FAST = ("measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0", "quiet=true")

SLOW_PROGRAM = """\
import signal, sys, time
if {stubborn}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
with open(path[:-4] + "_out.csv", "w") as f:
    f.write("id,ms\\n")
    f.flush()
    for row in rows:
        time.sleep(1.0)
        f.write(f"{{row[0]}},{{1 + float(row[1])}}\\n")
        f.flush()
"""


def environment(store: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    return env | {"MLFLOW_TRACKING_URI": store, "MLFLOW_EXPERIMENT_NAME": "interrupt-latency"}


def write_conf(conf: Path, stubborn: bool) -> None:
    (conf / "registry").mkdir(parents=True, exist_ok=True)
    script = conf / "slow_relu.py"
    script.write_text(SLOW_PROGRAM.format(stubborn=stubborn))
    (conf / "registry" / "slow_relu.yaml").write_text(
        f"name: slow_relu\nsynonyms: [Relu]\nexe: [python, {script}]\nparam_descr: [N, C, H, W, mode]\nbackend: slow\n"
    )


def measure_once(case: str, signum: int, workdir: Path, store: str) -> tuple[float, float, int, str]:
    """(seconds to the benchmark's death, seconds to dlbench's exit, exit status, run status)."""
    workdir.mkdir(parents=True)
    if case == "training":
        overrides = ["+benchmark=mlp", "batch_size=8", "steps=100000", "threads=1", "quiet=true"]
    else:
        write_conf(workdir / "conf", stubborn=case == "sweep_stubborn")
        overrides = ["+benchmark=relu", "backend=slow", "batch_size=1", *FAST, "--config-dir", str(workdir / "conf")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlbench", *overrides],
        cwd=workdir,
        env=environment(store),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 180
    needle = "mlp.py" if case == "training" else "slow_relu.py"
    while not any(needle in _cmdline(c) for c in _children(parent)):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"{case}: the benchmark never started")
        time.sleep(0.05)
    time.sleep(2.5)  # mid-measurement
    children = _children(parent)
    sent = time.perf_counter()
    proc.send_signal(signum)
    gone, alive = psutil.wait_procs(children, timeout=60)
    children_s = time.perf_counter() - sent
    proc.wait(timeout=120)
    exit_s = time.perf_counter() - sent
    if alive:
        raise RuntimeError(f"{case}: {len(alive)} processes outlived dlbench")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("interrupt-latency")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return children_s, exit_s, proc.returncode, runs[0].info.status


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # it ended while we looked
        return ""


def _children(parent: psutil.Process) -> list[psutil.Process]:
    try:
        return parent.children(recursive=True)
    except psutil.Error:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="sweep,sweep_stubborn,training")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlbench-interrupt-")
    try:
        store = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        print(f"{'case':<16} {'signal':<8} {'children gone s':>16} {'exit s':>8} {'status':>7} run", flush=True)
        for case in args.cases.split(","):
            signals = (signal.SIGINT, signal.SIGTERM) if case == "sweep" else (signal.SIGINT,)
            for signum in signals:
                kids, exits = [], []
                for i in range(args.repeats):
                    workdir = Path(tmp) / f"{case}-{signum.name}-{i}"
                    children_s, exit_s, status, run_status = measure_once(case, signum, workdir, store)
                    kids.append(children_s)
                    exits.append(exit_s)
                print(
                    f"{case:<16} {signum.name:<8} {statistics.median(kids):>16.2f} {statistics.median(exits):>8.2f} "
                    f"{status:>7} {run_status}  (median of {args.repeats}; max exit {max(exits):.2f} s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
