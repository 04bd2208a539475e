"""Running a registered training script: its parameters resolved against the configuration, the profile
window checked, an ONNX export of its model and an instrumented run of it."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from dlbench import PROJECT_ROOT
from dlbench.config import DlbenchConfig
from dlbench.core.errors import TaskFailed
from dlbench.operators.registry import Registry, TrainingBenchmark


def training_entry(cfg: DlbenchConfig, registry: Registry) -> tuple[TrainingBenchmark, list[str]]:
    """The registered script of ``cfg.benchmark`` and its arguments, after checking the profile window."""
    bench = cfg.benchmark
    assert bench is not None and bench.kind == "training"
    try:
        entry = registry.training(bench.training)
    except KeyError as err:
        raise TaskFailed(f"benchmark {bench.name!r}: {err.args[0]} (conf/training/*.yaml)") from None
    check_profile_window(cfg)
    return entry, resolve_parameters(entry, cfg)


def export_model(cfg: DlbenchConfig, entry, arguments: list[str], workdir: Path) -> Path:
    """Run the training script with ``--export-onnx`` (its own arguments, so the model is the one trained)."""
    from dlbench.core.process import meaningful_tail, run_command

    path = workdir / f"{entry.name}_bs{cfg.batch_size}.onnx"
    command = [*entry.command, *arguments, "--export-onnx", str(path)]
    result = run_command(
        command, timeout=cfg.timeout, env=_script_env(), cwd=workdir, stderr_path=workdir / "export_stderr.txt"
    )
    failure = result.describe_failure()
    if failure or not path.exists():
        tail = meaningful_tail(result.stderr)
        raise TaskFailed(f"exporting {entry.name} to ONNX: the script {failure or 'wrote no model'}\n{tail}")
    return path


def _script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "MLFLOW_RUN_ID": "",  # the instrumentation must not publish: this task logs one run itself
    }
    env.update(extra or {})
    return env


def run_training(cfg: DlbenchConfig, entry, arguments: list[str], workdir: Path) -> tuple[Path, object]:
    """The instrumented training with its profile window; returns the profile folder and the process."""
    from dlbench.core.process import meaningful_tail, run_command
    from dlbench.training.instrument import ENV_BATCHES, ENV_DIR, ENV_WARMUP
    from dlbench.training.profile import BATCHES_FILE

    profile_dir = workdir / "profile"
    shutil.rmtree(profile_dir, ignore_errors=True)
    profile_dir.mkdir(parents=True)
    env = _script_env(
        {
            ENV_WARMUP: str(cfg.profile.warmup),
            ENV_BATCHES: str(cfg.profile.batches),
            ENV_DIR: str(profile_dir),
            "DLBENCH_THREADS": str(cfg.threads),
        }
    )
    result = run_command(
        [*entry.command, *arguments], timeout=cfg.timeout, env=env, cwd=workdir, stderr_path=workdir / "stderr.txt"
    )
    failure = result.describe_failure()
    if failure or not (profile_dir / BATCHES_FILE).exists() or not list(profile_dir.glob("batch_*_ops.csv")):
        tail = meaningful_tail(result.stderr)
        raise TaskFailed(
            f"training {entry.name}: the script {failure or 'wrote no profile'} ({profile_dir})"
            + (f"\n{tail}" if tail else "")
        )
    return profile_dir, result


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


def check_profile_window(cfg: DlbenchConfig) -> None:
    if cfg.profile.batches < 1:
        raise TaskFailed(f"profile.batches={cfg.profile.batches}: a training benchmark profiles at least one batch")
    if cfg.steps <= cfg.profile.warmup:
        raise TaskFailed(
            f"steps={cfg.steps} but profile.warmup={cfg.profile.warmup}: no batch would be profiled; "
            f"raise steps above {cfg.profile.warmup} or lower profile.warmup"
        )
