"""Running a registered training script: its parameters resolved against the configuration, the profile
window and dtype checked, and an instrumented run of it (exporting its network to ONNX on request)."""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import PROJECT_ROOT
from dlbench.config import DlbenchConfig
from dlbench.core.allocator import allocator_environment
from dlbench.core.cores import thread_environment
from dlbench.core.device import check_ranks_fit, resolve_device
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.folders import fresh_folder
from dlbench.core.process import ProcessResult, meaningful_tail, run_command
from dlbench.operators.registry import Registry, TrainingBenchmark
from dlbench.training.export import ENV_EXPORT, error_path
from dlbench.training.facts import read_facts
from dlbench.training.instrument import ENV_BATCHES, ENV_DIR, ENV_WARMUP
from dlbench.training.profile import BATCHES_FILE
from dlbench.training.tensor_stats import ENV_STATS

log = logging.getLogger(__name__)


def training_entry(cfg: DlbenchConfig, registry: Registry) -> tuple[TrainingBenchmark, list[str]]:
    """The registered script of ``cfg.benchmark`` and its arguments, after checking the profile window and that
    its ranks fit the GPUs."""
    bench = cfg.benchmark
    assert bench is not None and bench.kind == "training"
    try:
        entry = registry.training(bench.training)
    except KeyError as err:
        raise ConfigurationError(f"benchmark {bench.name!r}: {err.args[0]} (conf/training/*.yaml)") from None
    check_profile_window(cfg)
    if cfg.world_size > 1:  # NCCL: one GPU per rank, refused before torchrun starts any
        check_ranks_fit([cfg.world_size], resolve_device(cfg.device))
    return entry, resolve_parameters(entry, cfg)


def script_environment(cfg: DlbenchConfig, profile_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    """How a training script is started: the dlbench that started it importable (installed or not), its
    profile window and threads (``OMP_NUM_THREADS`` too: a script that leaves threads to torch runs with the
    count the operator benchmarks run with), the allocator the operator benchmarks run with; then ``extra``."""
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p),
        ENV_WARMUP: str(cfg.profile.warmup),
        ENV_BATCHES: str(cfg.profile.batches),
        ENV_DIR: str(profile_dir),
        "DLBENCH_THREADS": str(cfg.threads),
        **thread_environment(cfg.threads),
        **allocator_environment(cfg.keep_heap),
        **extra,
    }


@dataclass(frozen=True)
class TrainingRun:
    """A finished instrumented training: its profile folder, the process, what it ran with, its network."""

    profile_dir: Path
    process: ProcessResult
    facts: dict[str, Any]
    model_path: Path | None


def run_training(
    cfg: DlbenchConfig,
    entry: TrainingBenchmark,
    arguments: list[str],
    workdir: Path,
    export: bool = False,
    tensor_stats: bool = False,
    extra_env: dict[str, str] | None = None,
) -> TrainingRun:
    """The instrumented training with its profile window. ``export``: the context manager also exports the
    network it is handed to ONNX (``DLBENCH_EXPORT_ONNX``), so the model is exactly the one trained.
    ``tensor_stats``: it records the inputs of every operator in the last warm-up batch
    (:mod:`dlbench.training.tensor_stats`). ``extra_env``: more variables for the script (what else dlbench
    asks of it)."""
    profile_dir = fresh_folder(workdir, "profile")  # a second training in ``workdir`` gets profile-2
    model_path = profile_dir / f"{entry.name}.onnx"
    # the instrumentation must not publish: this task logs one run itself
    extra = {"MLFLOW_RUN_ID": "", ENV_EXPORT: str(model_path) if export else "", ENV_STATS: "1" if tensor_stats else "",
             **(extra_env or {})}  # fmt: skip
    env = script_environment(cfg, profile_dir, extra)
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
    if export and not model_path.exists():
        raise TaskFailed(f"training {entry.name}: {export_problem(model_path)}")
    return TrainingRun(profile_dir, result, read_facts(profile_dir), model_path if export else None)


class TrainingRounds:
    """The trainings of an evaluation's rounds (``evaluate.rounds``): the profiled training's ``batches.csv``
    first, then, called with round ``index`` before each later benchmark round, the script trained once more
    (no export) and its ``batches.csv`` logged to ``run`` under ``profile/round<N>``."""

    def __init__(self, cfg: DlbenchConfig, entry: TrainingBenchmark, arguments: list[str], workdir: Path, run: Any,
                 first: Path) -> None:  # fmt: skip
        self.cfg, self.entry, self.arguments, self.workdir, self.run = cfg, entry, arguments, workdir, run
        self.batches = [first]

    def __call__(self, index: int) -> None:
        log.info("training %s again: round %d of %d (evaluate.rounds)", self.entry.name, index + 1,
                 self.cfg.evaluate.rounds)  # fmt: skip
        again = run_training(self.cfg, self.entry, self.arguments, self.workdir / f"round{index + 1}")
        self.run.log_artifact(again.profile_dir / BATCHES_FILE, f"profile/round{index + 1}")
        self.batches.append(again.profile_dir / BATCHES_FILE)


def export_problem(model_path: Path) -> str:
    """Why a script's network is not at ``model_path`` after its training."""
    failed = error_path(model_path)
    if failed.exists():
        last = failed.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        return f"exporting the network to ONNX failed: {last[0] if last else 'see ' + str(failed)}"
    return (
        "the script never handed its network to the instrumentation, so it cannot be exported to ONNX: wrap each "
        "batch in op_performance_analysis(batch_idx, inputs, model) or "
        "op_performance_analysis_generic(batch_idx, inputs, model, cuda)"
    )


def check_training_dtype(cfg: DlbenchConfig, entry: TrainingBenchmark) -> None:
    """``dtype`` other than float32 needs a script that takes it (``${dtype}`` in its parameters): benchmarks in
    one dtype against training in another would predict nothing. ``amp`` and ``channels_last`` likewise."""
    if cfg.dtype != "float32" and "${dtype}" not in entry.parameters:
        raise ConfigurationError(
            f"dtype={cfg.dtype}: training entry {entry.name} ({entry.source}) does not pass the dtype to its "
            "script (no ${dtype} in its parameters), so it would train in its own dtype; use dtype=float32 or "
            "give the script a dtype argument"
        )
    for key, value, default in (("amp", cfg.amp, "none"), ("channels_last", cfg.channels_last, False)):
        if value != default and f"${{{key}}}" not in entry.parameters:
            raise ConfigurationError(
                f"{key}={str(value).lower()}: training entry {entry.name} ({entry.source}) does not pass it to its "
                f"script (no ${{{key}}} in its parameters); what the script runs is detected from its profile "
                f"anyway (logged as the run's {key} param), so leave {key} at {str(default).lower()} or pass it "
                "to the script"
            )


def check_ran_in_dtype(cfg: DlbenchConfig, entry: TrainingBenchmark, facts: dict[str, Any]) -> None:
    """The network's parameters must be in the dtype the benchmarks run in."""
    ran = facts.get("observed", {}).get("dtype")
    if ran is not None and ran != cfg.dtype:
        raise TaskFailed(
            f"dtype={cfg.dtype} but training {entry.name} ran its network in {ran}; the prediction would compare "
            f"{cfg.dtype} kernels with {ran} training"
        )


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
        raise ConfigurationError(
            f"training entry {entry.source}: field parameters {entry.parameters!r}: {message}"
        ) from err
    try:
        return shlex.split(str(text))
    except ValueError as err:
        raise ConfigurationError(f"training entry {entry.source}: field parameters {text!r}: {err}") from err


def check_profile_window(cfg: DlbenchConfig) -> None:
    if cfg.profile.batches < 1:
        raise ConfigurationError(
            f"profile.batches={cfg.profile.batches}: a training benchmark profiles at least one batch"
        )
    if cfg.steps <= cfg.profile.warmup:
        raise ConfigurationError(
            f"steps={cfg.steps} but profile.warmup={cfg.profile.warmup}: no batch would be profiled; "
            f"raise steps above {cfg.profile.warmup} or lower profile.warmup"
        )


#: The measured step time is the median of this many unprofiled steps after the warm-up, at least.
MIN_STEADY_STEPS = 3


def check_steady_steps(cfg: DlbenchConfig, entry: TrainingBenchmark) -> None:
    """Before training: enough unprofiled steps after the warm-up for the measured step time (when dlbench
    tells the script how many steps to run)."""
    steady = cfg.steps - cfg.profile.warmup - cfg.profile.batches
    if "${steps}" in entry.parameters and steady < MIN_STEADY_STEPS:
        raise ConfigurationError(
            f"steps={cfg.steps} with profile.warmup={cfg.profile.warmup} and profile.batches={cfg.profile.batches} "
            f"leaves {max(steady, 0)} unprofiled step(s) after the warm-up; the measured step time is their median "
            f"and needs at least {MIN_STEADY_STEPS}: use steps={cfg.profile.warmup + cfg.profile.batches + 3} or more"
        )
