"""Training benchmarks: run an instrumented training script as its own process inside an MLflow run; the
script's instrumentation logs step metrics to that run and each profiled batch as a nested child run."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from dataclasses import asdict
from pathlib import Path

from dlbench import PROJECT_ROOT
from dlbench.app import AppContext, TaskFailed
from dlbench.config import DlbenchConfig
from dlbench.instrument import ENV_BATCHES, ENV_DIR, ENV_PROGRESS, ENV_WARMUP, SUMMARY_FILE
from dlbench.registry import TrainingBenchmark, command_availability, load_registry

log = logging.getLogger(__name__)

STDERR_ARTIFACT = "stderr.txt"
STDOUT_ARTIFACT = "stdout.txt"


def resolve_parameters(entry: TrainingBenchmark, cfg: DlbenchConfig) -> list[str]:
    """The entry's ``parameters`` with ``${...}`` resolved against the run's configuration, split like a
    shell would split words (never run through one)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    root = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=False)
    assert isinstance(root, dict)
    root["_training_parameters"] = entry.parameters
    try:
        text = OmegaConf.create(root)["_training_parameters"]
    except OmegaConfBaseException as err:
        message = str(err).splitlines()[0]
        raise TaskFailed(f"training entry {entry.source}: field parameters {entry.parameters!r}: {message}") from err
    try:
        return shlex.split(str(text))
    except ValueError as err:
        raise TaskFailed(f"training entry {entry.source}: field parameters {text!r}: {err}") from err


def training_params(cfg: DlbenchConfig, entry: TrainingBenchmark, arguments: list[str]) -> dict[str, object]:
    assert cfg.benchmark is not None
    return {
        "benchmark": cfg.benchmark.name,
        "training": entry.name,
        "model": entry.model,
        "batch_size": cfg.batch_size,
        "steps": cfg.steps,
        "lr": cfg.lr,
        "threads": cfg.threads,
        "device": cfg.device,
        "dtype": cfg.dtype,
        "timeout": cfg.timeout,
        **{f"profile.{k}": v for k, v in asdict(cfg.profile).items()},
        "parameters": shlex.join(arguments),
        "command": shlex.join([*entry.command, *arguments]),
    }


def check_profile_window(cfg: DlbenchConfig) -> None:
    if cfg.profile.batches < 1:
        raise TaskFailed(f"profile.batches={cfg.profile.batches}: a training benchmark profiles at least one batch")
    if cfg.steps <= cfg.profile.warmup:
        raise TaskFailed(
            f"steps={cfg.steps} but profile.warmup={cfg.profile.warmup}: no batch would be profiled; "
            f"raise steps above {cfg.profile.warmup} or lower profile.warmup"
        )


def child_env(run: object, experiment_id: str, profile_dir: Path, cfg: DlbenchConfig) -> dict[str, str]:
    """MLflow's own variables (the script logs into this run) and the profile window."""
    from dlbench.tracking import child_environment

    env = child_environment(run)  # type: ignore[arg-type]
    env["MLFLOW_EXPERIMENT_ID"] = experiment_id
    env[ENV_WARMUP] = str(cfg.profile.warmup)
    env[ENV_BATCHES] = str(cfg.profile.batches)
    env[ENV_DIR] = str(profile_dir)
    env["DLBENCH_THREADS"] = str(cfg.threads)
    env["DLBENCH_DEVICE"] = cfg.device
    # The script imports the dlbench that started it, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def run_training_benchmark(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """One MLflow run for one training benchmark; the run ends FAILED (and this raises ``TaskFailed``) when
    the script is missing, fails, times out or ends without writing its profile."""
    from dlbench.progress import progress
    from dlbench.protocol import run_command
    from dlbench.sweep import sweep_tags
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking

    assert cfg.benchmark is not None
    bench = cfg.benchmark
    registry = load_registry(ctx.config_dirs)
    try:
        entry = registry.training(bench.training)
    except KeyError as err:
        raise TaskFailed(f"benchmark {bench.name!r}: {err.args[0]} (conf/training/*.yaml)") from None
    check_profile_window(cfg)
    arguments = resolve_parameters(entry, cfg)
    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
    run_name = cfg.mlflow.run_name or f"{bench.name}-bs{cfg.batch_size}-{cfg.device}"
    params = training_params(cfg, entry, arguments)
    tags = sweep_tags(ctx, "training", bench.name, entry.name)
    workdir = ctx.output_dir / "training" / bench.name
    profile_dir = workdir / "profile"
    shutil.rmtree(workdir, ignore_errors=True)  # stale files must not pass for this run's profile
    profile_dir.mkdir(parents=True)
    command = [*entry.command, *arguments]

    with TrackedRun(target, run_name, params, tags, experiment_id=experiment_id) as run:
        run.set_tags({"dlbench.run_id": run.run_id})
        if ctx.config_yaml:
            run.log_text(ctx.config_yaml, "config.yaml")
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
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise TaskFailed(f"training benchmark {entry.name}: {problem}" + (f"\n{tail}" if tail else ""))
        if not cfg.quiet:
            print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "")
        print(f"{run_name}: MLflow run {run.run_id}, profile in {profile_dir}")
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
