"""Parallel sweeps and tracking cost: wall time of a 32-job operator sweep with the joblib launcher at
n_jobs=1 and n_jobs=2 (default SQLite store), and MLflow logging time per run against SQLite and against a
local ``mlflow server`` (SQLite backend behind it).

    python bench/sweep_parallel.py [--jobs 32] [--n-jobs 1 2] [--log-runs 5] [--out sweep_parallel.csv]

The sweep is ``+benchmark=globalavgpool batch_size=1..jobs`` (two tiny operations per job, so the figure is
mostly dlbench's own per-job cost: interpreter, imports, benchmark process, MLflow). Logging time per run is
one operator sweep's complete MLflow record (run, params, tags, per-operation metrics, results.csv, protocol
CSVs, config, plot) timed in-process, with the measurement itself done once beforehand.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlbench import CONF_DIR  # noqa: E402

FAST = ("measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0", "quiet=true")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    env.update(extra)
    return env


def sweep_wall_time(jobs: int, n_jobs: int, workdir: Path) -> tuple[float, int]:
    """Seconds for the whole multirun, and how many of its runs ended FINISHED."""
    from mlflow.tracking import MlflowClient

    workdir.mkdir(parents=True)
    command = [
        sys.executable, "-m", "dlbench", "-m", "+benchmark=globalavgpool", f"batch_size=range(1,{jobs + 1})",
        "hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}", *FAST,
    ]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, cwd=workdir, env=_env(), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"sweep with n_jobs={n_jobs} failed:\n{result.stderr[-3000:]}")
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("dlbench")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return seconds, sum(r.info.status == "FINISHED" for r in runs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{root / 'server.db'}", "--artifacts-destination", str(root / "art"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return process, url
        except OSError:
            time.sleep(1)
    os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit("mlflow server did not start within 300 s")


def logging_seconds(uri: str, runs: int, workdir: Path) -> list[float]:
    """Seconds per run to log one operator sweep's full MLflow record into ``uri``."""
    import matplotlib

    matplotlib.use("Agg")
    from dlbench.analysis.report import log_sweep
    from dlbench.config import BenchmarkConfig, DlbenchConfig
    from dlbench.core.context import AppContext
    from dlbench.operators.measure import sweep_params
    from dlbench.operators.plan import select_implementations
    from dlbench.operators.registry import load_registry
    from dlbench.operators.runner import measure_operations, run_settings
    from dlbench.operators.workload import operations_from_benchmark
    from dlbench.tracking.run import TrackedRun
    from dlbench.tracking.runs import run_tags
    from dlbench.tracking.store import TrackingTarget, prepare_store

    bench = BenchmarkConfig(
        name="relu", op_type="Relu", common={"N": 1, "mode": 0},
        operations=[{"name": f"op{c}", "C": c, "H": 14, "W": 14} for c in (64, 128, 256, 512, 1024, 2048)],
    )  # fmt: skip
    cfg = DlbenchConfig(benchmark=bench, batch_size=1)
    cfg.measure.warmup, cfg.measure.min_reps, cfg.measure.min_time_s = 1, 2, 0.0
    ctx = AppContext(config_dirs=(CONF_DIR,), start_dir=workdir, output_dir=workdir, config_yaml="batch_size: 1\n")
    (entry,) = select_implementations(load_registry(ctx.config_dirs), "Relu", "torch", "cpu")
    operations = operations_from_benchmark(bench, cfg.dtype)
    result, files = measure_operations(entry, operations, run_settings(cfg, "cpu"), workdir / "protocol", stem="log")
    target = TrackingTarget(uri, "logging-cost")
    experiment_id = prepare_store(target)
    params = sweep_params(cfg, entry, "relu", len(operations), "cpu")
    tags = run_tags(ctx, "operator_sweep", "relu", entry.name)
    seconds = []
    for i in range(runs):
        started = time.perf_counter()
        with TrackedRun(
            target, f"logging-{i}", params, tags, experiment_id=experiment_id, config_yaml=ctx.config_yaml
        ) as run:
            log_sweep(run, cfg, operations, result, files, "logging cost")
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--n-jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--log-runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows: list[tuple[str, str, float, str]] = []
    print(f"cores available: {len(os.sched_getaffinity(0))}; load average: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, url = start_server(root)
        try:
            for store, uri in (("sqlite", f"sqlite:///{root / 'log.db'}"), ("server", url)):
                seconds = logging_seconds(uri, args.log_runs, root / f"log-{store}")
                median = statistics.median(seconds)
                each = ", ".join(f"{s:.2f}" for s in seconds)
                print(f"MLflow logging per run, {store:6s}: median {median:.2f} s (runs: {each})")
                rows.append(("logging_per_run_s", store, median, f"{args.log_runs} runs"))
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        for n_jobs in args.n_jobs:
            seconds, finished = sweep_wall_time(args.jobs, n_jobs, root / f"sweep-{n_jobs}")
            print(
                f"{args.jobs}-job sweep, n_jobs={n_jobs}: {seconds:.1f} s wall ({seconds / args.jobs:.2f} s per job), "
                f"{finished}/{args.jobs} runs FINISHED; load average now {os.getloadavg()[0]:.1f}"
            )
            rows.append(("sweep_wall_s", f"n_jobs={n_jobs}", seconds, f"{finished}/{args.jobs} FINISHED"))
    if args.out:
        import pandas as pd

        pd.DataFrame(rows, columns=["measure", "setting", "value", "note"]).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
