"""Scale-out through Slurm: a 24-job operator sweep through a one-node Slurm cluster started on this machine (real
munged, slurmctld, slurmd and sbatch; two jobs at once) against the same sweep run sequentially in one process
(Hydra's basic launcher); runs lost; runs left RUNNING after one job of a sweep is SIGKILLed, before and after
``task=gc``.

    python bench/slurm_sweep.py [--jobs 24] [--at-once 2] [--kill-jobs 4]     (as root; slurm-wlm and munge)

Both sweeps are ``+benchmark=relu batch_size=1..jobs threads=1`` with short measurement settings, into their own
SQLite store, so the figure is mostly the cost per job: an interpreter with dlbench, Hydra and MLflow imported,
the benchmark process, MLflow logging, and under Slurm the submission, scheduling and the job's own start-up.
The Slurm jobs ask for one CPU each and drop ``--exclusive``
(``~hydra.launcher.additional_parameters.exclusive``), so two fit on this 2-CPU node; on a real cluster the
default keeps whole nodes. Wall times include everything from the command's start to its exit. The load
average is printed beside every figure: this machine is shared, so timings are noisy."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from local_services import LocalSlurm  # noqa: E402

FAST = ("measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0", "quiet=true", "threads=1")
SLURM = (
    "hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
    "~hydra.launcher.additional_parameters.exclusive",
)  # fmt: skip


def say(text: str) -> None:
    print(text, flush=True)


def load() -> str:
    return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return {**env, **extra}


def _runs(store: str, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id], max_results=1000)


def _median_open_s(runs: list) -> float:
    """Median seconds a run was open (the job's measuring and logging, not its start-up or queueing)."""
    import statistics

    return statistics.median((r.info.end_time - r.info.start_time) / 1000 for r in runs if r.info.end_time)


def _max_at_once(runs: list) -> int:
    """The most runs that were open at the same moment (from their start and end times)."""
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time or r.info.start_time, -1) for r in runs])
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def beat_ms(store: str, beats: int = 20) -> float:
    """Median milliseconds of one heartbeat (the tag write a run's heartbeat thread makes) on ``store``."""
    import statistics

    from dlbench.tracking.heartbeat import Heartbeat
    from dlbench.tracking.run import TrackedRun
    from dlbench.tracking.store import TrackingTarget, mlflow_client, prepare_store

    target = TrackingTarget(store, "heartbeat-cost")
    prepare_store(target)
    client = mlflow_client(target)
    with TrackedRun(target, "heartbeat-cost") as run:
        beat = Heartbeat(target, run.run_id)
        seconds = []
        for _ in range(beats):
            started = time.perf_counter()
            beat.beat(client)
            seconds.append(time.perf_counter() - started)
    return 1000 * statistics.median(seconds)


def timed_sweep(workdir: Path, store: str, experiment: str, overrides: tuple[str, ...], env: dict) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "dlbench", "-m", *overrides],
        cwd=workdir, env=_env(MLFLOW_TRACKING_URI=store, MLFLOW_EXPERIMENT_NAME=experiment, **env),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"sweep {experiment} failed:\n{result.stderr[-3000:]}")
    return seconds


def kill_one_job(cluster: LocalSlurm, workdir: Path, store: str, jobs: int) -> tuple[int, int, int]:
    """A sweep of ``jobs`` slower jobs; SIGKILL the dlbench process of the first job that runs; then task=gc.
    Returns runs RUNNING after the sweep, runs RUNNING after task=gc, and runs in the store."""
    import psutil

    experiment = "slurm-kill"
    slow = ("measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0.5", "quiet=true", "threads=1")
    env = _env(MLFLOW_TRACKING_URI=store, MLFLOW_EXPERIMENT_NAME=experiment, SLURM_CONF=cluster.env["SLURM_CONF"])
    sweep = subprocess.Popen(
        [sys.executable, "-m", "dlbench", "-m", "+benchmark=relu", f"batch_size=range(1,{jobs + 1})", *SLURM, *slow,
         "gc.heartbeat_s=1"],
        cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    victim = None
    while victim is None and time.monotonic() < deadline:
        running = {r.data.tags.get("slurm.job_id") for r in _runs(store, experiment) if r.info.status == "RUNNING"}
        for proc in psutil.process_iter(["name", "cmdline"]):
            try:  # the dlbench process of a job whose run is open (what the OOM killer would pick)
                if proc.info["name"] != "srun" and "submitit.core._submit" in " ".join(proc.info["cmdline"] or []):
                    if proc.environ().get("SLURM_JOB_ID") in running:
                        victim = proc
                        break
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)
    if victim is None:
        sweep.kill()
        raise SystemExit("no job of the kill sweep started within 600 s")
    victim.kill()
    _, stderr = sweep.communicate(timeout=900)
    if "ended without a result" not in stderr:
        raise SystemExit(f"the launcher did not report the killed job:\n{stderr[-3000:]}")
    running_after_sweep = sum(r.info.status == "RUNNING" for r in _runs(store, experiment))
    time.sleep(4)
    gc = subprocess.run(
        [sys.executable, "-m", "dlbench", "task=gc", "gc.stale_after_s=3", "gc.heartbeat_s=1"],
        cwd=workdir, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if gc.returncode != 0:
        raise SystemExit(f"task=gc failed:\n{gc.stderr[-3000:]}")
    runs = _runs(store, experiment)
    return running_after_sweep, sum(r.info.status == "RUNNING" for r in runs), len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--at-once", type=int, default=2, help="Slurm jobs running at once (array parallelism)")
    parser.add_argument("--kill-jobs", type=int, default=4, help="jobs of the sweep one of which is SIGKILLed")
    args = parser.parse_args()
    reason = LocalSlurm.missing()
    if reason:
        raise SystemExit(f"slurm_sweep: {reason}")

    sweep = ("+benchmark=relu", f"batch_size=range(1,{args.jobs + 1})", *FAST)
    with tempfile.TemporaryDirectory(prefix="dlbench-slurm-bench-") as tmp:
        workdir = Path(tmp)
        store = f"sqlite:///{workdir / 'mlflow.db'}"
        say(f"{args.jobs}-job sweep: +benchmark=relu batch_size=1..{args.jobs} threads=1 ({load()})")
        before = load()
        sequential_s = timed_sweep(workdir, store, "sequential", sweep, {})
        sequential = _runs(store, "sequential")
        say(f"  sequential, one process : {sequential_s:7.1f} s  ({before} -> {load()})")
        with LocalSlurm(kill_wait_s=10) as cluster:
            before = load()
            slurm_s = timed_sweep(
                workdir, store, "slurm", (*sweep, *SLURM, f"hydra.launcher.array_parallelism={args.at_once}"),
                {"SLURM_CONF": cluster.env["SLURM_CONF"]},
            )  # fmt: skip
            slurm = _runs(store, "slurm")
            say(f"  Slurm, {args.at_once} jobs at once     : {slurm_s:7.1f} s  ({before} -> {load()})")
            before = load()
            after_sweep, after_gc, kill_runs = kill_one_job(cluster, workdir, store, args.kill_jobs)
            killed_at = load()
        beat = beat_ms(store)
        say(f"  one heartbeat (tag write, SQLite): {beat:.1f} ms median of 20 ({load()}); every 30 s by default")
        ratio = slurm_s / sequential_s
        say(f"  wall ratio Slurm / sequential: {ratio:.2f}  (speed-up {1 / ratio:.2f}x)")
        for name, runs in (("sequential", sequential), ("Slurm", slurm)):
            finished = sum(r.info.status == "FINISHED" for r in runs)
            say(
                f"  {name:10s}: {finished}/{args.jobs} runs FINISHED, runs lost {args.jobs - finished}, "
                f"most runs open at once {_max_at_once(runs)}, median run open {_median_open_s(runs):.1f} s"
            )
        say(
            f"  SIGKILL of 1 of {args.kill_jobs} Slurm jobs ({before} -> {killed_at}): {kill_runs} runs in the store, "
            f"{after_sweep} left RUNNING after the sweep, {after_gc} RUNNING after task=gc"
        )


if __name__ == "__main__":
    main()
