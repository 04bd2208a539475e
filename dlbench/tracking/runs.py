"""The one way a task opens a run: the configured tracking target (store prepared once per process), the run
name, and the tags every dlbench run carries (system, kind, benchmark, implementation, sweep and job, the
command as the run's source)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.tracking.naming import dlbench_command, run_name, user_name
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget, prepare_store, resolve_tracking
from dlbench.tracking.ui import publish_view

_PREPARED: dict[TrackingTarget, str] = {}
#: Kinds of run that measure while open: MLflow's system metrics say whether the machine was busy meanwhile
MONITORED_KINDS = frozenset({"operator_sweep", "training", "evaluation", "model_benchmark"})
#: Every run opened in this process, in order: the command's last line names them.
_OPENED: list[TrackedRun] = []


@dataclass(frozen=True)
class RunPlace:
    """Where a task's runs go: the tracking target and the id of its experiment (created if needed)."""

    target: TrackingTarget
    experiment_id: str


def run_place(cfg: DlbenchConfig, ctx: AppContext) -> RunPlace:
    """The configured target, checked and prepared on first use in this process (later calls reuse it)."""
    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    if target not in _PREPARED:
        _PREPARED[target] = prepare_store(target, cfg.mlflow.connect_timeout_s)
        publish_view(target, _PREPARED[target])
    return RunPlace(target, _PREPARED[target])


def job_run_name(cfg: DlbenchConfig, benchmark: str, parts: Sequence[str] = (), device: str = "") -> str:
    """A run name that fits the run list: benchmark, ``parts`` (implementation, ...), batch size, dtype,
    the device where it is not the CPU, and the short host name; ``amp``/``channels_last`` where set (ampbf16, nhwc)."""
    precision = [f"amp{cfg.amp}"] if cfg.amp != "none" else []
    precision += ["nhwc"] if cfg.channels_last else []
    return run_name(benchmark, [*parts, *precision], cfg.batch_size, cfg.dtype, device or cfg.device, cfg.fp32_math)


def run_tags(ctx: AppContext, kind: str, benchmark: str, implementation: str = "") -> dict[str, str]:
    """System fingerprint, ``dlbench.kind``/``benchmark``/``implementation``, the sweep and job of a multirun,
    the command-line overrides, and what the caller's environment adds (an MLflow Project's parent run)."""
    from dlbench.tracking.system import hardware_tags

    tags = {**hardware_tags(), "dlbench.kind": kind, "dlbench.benchmark": benchmark, **ctx.extra_tags}
    if implementation:
        tags["dlbench.implementation"] = implementation
    if ctx.sweep_id:
        tags["dlbench.sweep"] = ctx.sweep_id
        tags["dlbench.job"] = ctx.job
    if ctx.overrides:
        tags["dlbench.overrides"] = " ".join(ctx.overrides)
    tags["mlflow.source.name"] = dlbench_command(ctx.overrides)  # the UI's "Source" column
    tags["mlflow.source.type"] = "LOCAL"
    if user_name():
        tags.setdefault("mlflow.user", user_name())
    return tags


def open_run(
    cfg: DlbenchConfig,
    ctx: AppContext,
    *,
    kind: str,
    benchmark: str,
    name: str,
    params: Mapping[str, object] | None = None,
    implementation: str = "",
    tags: Mapping[str, object] | None = None,
    parent_run_id: str | None = None,
) -> TrackedRun:
    """A run of ``kind`` to use as a context manager: it ends FINISHED, or FAILED/KILLED with the error.

    ``name`` is the default run name; ``mlflow.run_name`` replaces it for a top-level run (children of
    ``parent_run_id`` keep theirs, so they stay apart). The resolved configuration is logged with it."""
    place = run_place(cfg, ctx)
    monitored = kind in MONITORED_KINDS and parent_run_id is None  # one monitor per process is enough
    if params is not None:
        params = {**params, "fp32_math": cfg.fp32_math}  # what float32 computed in, on every run that logs params
    run = TrackedRun(
        place.target,
        name if parent_run_id else (cfg.mlflow.run_name or name),
        params,
        {**run_tags(ctx, kind, benchmark, implementation), **(tags or {})},
        parent_run_id=parent_run_id,
        experiment_id=place.experiment_id,
        config_yaml=ctx.config_yaml,
        system_metrics_s=cfg.mlflow.system_metrics_interval_s if monitored else 0.0,
        heartbeat_s=cfg.gc.heartbeat_s,
        on_open=_log_machine,
    )
    _OPENED.append(run)
    return run


def _log_machine(run: TrackedRun) -> None:
    """Every run's ``dlbench.machine.*`` tags and ``machine.json`` (:mod:`dlbench.tracking.system`)."""
    from dlbench.tracking.system import log_machine_state

    log_machine_state(run)


def opened_runs() -> list[TrackedRun]:
    """The runs ``open_run`` has started in this process so far (those that got as far as an id)."""
    return [run for run in _OPENED if run.run_id]
