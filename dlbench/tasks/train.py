"""Training benchmarks: run an instrumented training script as its own process inside an MLflow run; the
script's instrumentation logs step metrics to that run and each profiled batch as a nested child run."""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import asdict
from pathlib import Path

from dlbench.analysis.report import NOTE_TAG, training_note
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed
from dlbench.core.folders import fresh_folder
from dlbench.core.process import meaningful_tail, run_command
from dlbench.core.progress import progress
from dlbench.operators.registry import TrainingBenchmark, command_availability, load_registry
from dlbench.tracking.runs import job_run_name, open_run, run_place
from dlbench.tracking.ui import run_link
from dlbench.training.instrument import ENV_PROGRESS
from dlbench.training.profile import SUMMARY_FILE
from dlbench.training.scripts import script_environment, training_entry

log = logging.getLogger(__name__)

STDERR_ARTIFACT = "stderr.txt"
STDOUT_ARTIFACT = "stdout.txt"


def training_params(cfg: DlbenchConfig, entry: TrainingBenchmark, arguments: list[str]) -> dict[str, object]:
    """What dlbench decides; batch size, steps, learning rate and the rest are what the script reports it ran
    with (logged by its instrumentation), not dlbench's defaults, which the script may not have taken."""
    assert cfg.benchmark is not None
    return {
        "benchmark": cfg.benchmark.name,
        "training": entry.name,
        "model": entry.model,
        "timeout": cfg.timeout,
        **{f"profile.{k}": v for k, v in asdict(cfg.profile).items()},
        "parameters": shlex.join(arguments),
        "command": shlex.join([*entry.command, *arguments]),
    }


def child_env(run: object, experiment_id: str, profile_dir: Path, cfg: DlbenchConfig) -> dict[str, str]:
    """MLflow's own variables (the script logs into this run) and the profile window."""
    from dlbench.tracking.run import child_environment

    extra = {**child_environment(run), "MLFLOW_EXPERIMENT_ID": experiment_id, "DLBENCH_DEVICE": cfg.device}  # type: ignore[arg-type]
    return script_environment(cfg, profile_dir, extra)


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """One MLflow run for one training benchmark; the run ends FAILED (and this raises ``TaskFailed``) when
    the script is missing, fails, times out or ends without writing its profile."""
    assert cfg.benchmark is not None
    bench = cfg.benchmark
    entry, arguments = training_entry(cfg, load_registry(ctx.config_dirs))
    place = run_place(cfg, ctx)
    experiment_id = place.experiment_id
    name = job_run_name(cfg, bench.name, ["train"])
    params = training_params(cfg, entry, arguments)
    workdir = fresh_folder(ctx.output_dir / "training", bench.name)  # no stale file passes for this profile
    profile_dir = fresh_folder(workdir, "profile")
    command = [*entry.command, *arguments]

    with open_run(
        cfg, ctx, kind="training", benchmark=bench.name, name=name, params=params, implementation=entry.name
    ) as run:
        missing = command_availability(entry.command)
        if missing:
            raise TaskFailed(f"training benchmark {entry.name} ({entry.source}): {missing}")
        log.info("training %s: %s", entry.name, shlex.join(command))
        stderr_path = workdir / STDERR_ARTIFACT
        progress_path = workdir / "progress"
        bar = progress(cfg.steps, f"{bench.name} bs{cfg.batch_size}", quiet=cfg.quiet, unit="step")

        def poll() -> None:
            try:
                done = int(progress_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return
            bar.update(max(0, min(done, cfg.steps) - bar.n))

        try:
            result = run_command(
                command,
                timeout=cfg.timeout,
                env={**child_env(run, experiment_id, profile_dir, cfg), ENV_PROGRESS: str(progress_path)},
                cwd=workdir,
                stderr_path=stderr_path,
                on_poll=poll,
            )
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep what the script said before it was stopped
            if stderr_path.exists():
                run.log_artifact(stderr_path)
            raise
        finally:
            bar.close()
        (workdir / STDOUT_ARTIFACT).write_text(result.stdout, encoding="utf-8")
        run.log_artifact(stderr_path)
        run.log_artifact(workdir / STDOUT_ARTIFACT)
        run.log_metrics({"process_seconds": result.seconds})
        problem = _failure(result, profile_dir)
        if problem:
            tail = meaningful_tail(result.stderr, 15)
            raise TaskFailed(f"training benchmark {entry.name}: {problem}" + (f"\n{tail}" if tail else ""))
        for rank_dir in sorted(profile_dir.glob("rank*")):  # a data-parallel script's other ranks (rank 0 logged)
            run.log_files(sorted(p for p in rank_dir.iterdir() if p.is_file()), f"profile/{rank_dir.name}")
        run.set_tags({NOTE_TAG: training_note(run.run_name, run.data().metrics)})
        if not cfg.quiet:
            print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "")
        print(f"{run.run_name}: MLflow run {run.run_id}, profile in {profile_dir}")
        print(f"in the MLflow UI: {run_link(place.target, experiment_id, run.run_id)}")
    return 0


def _failure(result: object, profile_dir: Path) -> str:
    """Why a finished script run does not count: its exit, or a missing profile or MLflow record."""
    describe = result.describe_failure()  # type: ignore[attr-defined]
    if describe:
        return f"the script {describe}"
    if not (profile_dir / SUMMARY_FILE).exists():
        return (
            f"the script ended without writing its profile ({profile_dir / SUMMARY_FILE}); does it wrap each "
            "batch in dlbench.instrument.op_performance_analysis and run more than profile.warmup batches?"
        )
    published = profile_dir / "published.json"
    if not published.exists():
        return "the script's instrumentation did not log the profiled batches to MLflow (see stderr.txt)"
    try:
        json.loads(published.read_text(encoding="utf-8"))
    except ValueError:
        return f"{published} is not valid JSON"
    return ""
