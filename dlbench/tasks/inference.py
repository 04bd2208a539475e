"""task=evaluate model=X.onnx: predict a served model's forward latency from its operator benchmarks and
measure it end to end, per engine (an onnxruntime session, a PyTorch eval forward), as one MLflow run.

Steps: extract the model for inference (BatchNormalization with running statistics, pooling without max
positions; inference Dropout is the identity and costs nothing), measure its operations with each engine's
backend, write the model with every dimension fixed and time it end to end on both engines with the same
threads, log predicted, measured and error per engine, the terms and the per-operation table."""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from dlbench.analysis.inference import (
    ENGINE_BACKENDS,
    engine_problems,
    engine_round_metrics,
    engine_rounds,
    inference_metrics,
    inference_table,
    overhead_terms,
    print_inference,
    session_prediction,
    summary_frame,
    with_round_intervals,
    with_session_prediction,
)
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.core.errors import ConfigurationError, TaskFailed
from dlbench.core.values import Measurement, Operation, TimeStats
from dlbench.onnx.errors import ExtractionError, ModelSettingError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.footprint import placed_forward
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.rebatch import rebatched_model
from dlbench.onnx.report import model_paths
from dlbench.onnx.step import graph_facts
from dlbench.operators.end_to_end import EndToEnd, measure_end_to_end, measure_session_nodes
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import plan_benchmarks
from dlbench.operators.registry import Registry, load_registry
from dlbench.operators.runner import RunSettings, run_settings
from dlbench.operators.step_rounds import (
    combine_step_rounds,
    end_to_end_samples,
    round_medians,
    round_samples,
    step_round_settings,
)
from dlbench.tracking.local_files import keep_model
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.runs import job_run_name, open_run
from dlbench.training import serve
from dlbench.training.scripts import run_training, training_entry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedScript:
    """A registered training script's network served in eval mode (``evaluate.mode=inference``): its eval-mode
    export, the batch the script hands over, and the torch figure timed in the script on the real module."""

    model: Path
    batch_size: int
    torch: TimeStats
    engine: str


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    device = resolve_device(cfg.device)
    if device != "cpu":
        raise ConfigurationError(f"task=evaluate model=... measures on the CPU (device={cfg.device}): use device=cpu")
    if cfg.measure.caches != "hot":
        raise ConfigurationError("task=evaluate model=... times onnxruntime, hot caches only: use measure.caches=hot")
    settings = run_settings(cfg, device)
    workdir = ctx.output_dir / "inference"
    workdir.mkdir(parents=True, exist_ok=True)
    served = _served_script(cfg, ctx, settings, workdir) if cfg.benchmark is not None else None
    path, batch_size = (served.model, served.batch_size) if served else (_model_file(cfg, ctx), cfg.batch_size)
    try:
        extraction = extract_operations(path, batch_size, training=False, dims=dict(cfg.dims))
        fixed = rebatched_model(path, batch_size, dict(cfg.dims))
    except ExtractionError as err:
        raise (ConfigurationError if isinstance(err, ModelSettingError) else TaskFailed)(str(err)) from err
    operations = deduplicate(extraction.operations())
    placed = None
    if cfg.evaluate.caches == "step":  # the torch kernels: each operation's footprint in one forward pass
        operations, placed = placed_forward(operations, extraction.nodes, graph_facts(path, batch_size))
    fixed_path = workdir / f"{extraction.model_name}_b{batch_size}.onnx"
    fixed_path.write_bytes(fixed.SerializeToString())
    params = {
        "model": extraction.model_name, "model_path": str(path), "model_sha256": extraction.sha256,
        "batch_size": batch_size, **{f"dims.{k}": v for k, v in dict(cfg.dims).items()},
        "engines": ",".join(ENGINE_BACKENDS), "threads": settings.threads, "operations": len(operations),
        "nodes": extraction.total_nodes, "nodes_skipped": len(extraction.skipped), "training": False,
        "torch_served": served.engine if served else "onnx2torch",
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        "evaluate.caches": cfg.evaluate.caches,  # the torch kernels' (onnxruntime's time hot caches only)
        "evaluate.rounds": cfg.evaluate.rounds,
    }  # fmt: skip
    name = job_run_name(cfg, extraction.model_name, ["inference"], device)
    load_start = os.getloadavg()[0]
    with open_run(cfg, ctx, kind="inference", benchmark=extraction.model_name, name=name, params=params) as run:
        engines = ["onnxruntime"] if served else list(ENGINE_BACKENDS)
        rounds = _measure_rounds(cfg, ctx, operations, settings, device, run, fixed_path, engines, workdir)
        measured, implementations, benchmark_errors = rounds.measured, rounds.implementations, rounds.errors
        end_to_end = rounds.end_to_end
        if served:  # the real module, timed by the script
            end_to_end = replace(end_to_end, stats={**end_to_end.stats, "torch": served.torch})
        for file in end_to_end.files:
            run.log_artifact(file, "end_to_end")
        table = inference_table(operations, measured, implementations)
        table["footprint_bytes"] = table["id"].map({op.id: op.footprint_bytes for op in operations})
        overheads = overhead_terms(table, end_to_end.facts)
        problems = engine_problems(table, benchmark_errors, end_to_end.errors)
        summary = summary_frame(table, end_to_end.stats, problems, overheads)
        metrics = inference_metrics(table, end_to_end.stats, overheads)
        if "onnxruntime" not in end_to_end.errors:
            metrics, summary = _as_the_session_runs(run, fixed_path, settings, workdir, end_to_end, metrics, summary)
        metrics, summary = _with_rounds(run, table, rounds, metrics, summary, overheads)
        run.log_table(table, "inference_operations.csv")
        run.log_table(summary, "inference_summary.csv")
        _log_problems(run, problems)
        agreement = end_to_end.facts.get("max_relative_difference", {})
        run.log_metrics({
            **metrics, **{f"outputs_{k}": float(v) for k, v in agreement.items()},
            "load_average_start": load_start, "load_average_end": os.getloadavg()[0],
            **({"forward_working_set_bytes": placed.working_set_bytes} if placed else {}),
        })  # fmt: skip
        print_inference(extraction.model_name, batch_size, settings.threads, summary)
        for key, value in agreement.items():
            if value > 1e-3:
                log.warning("the engines' outputs differ (%s: %.3g of the largest output)", key, value)
        if served:  # the script's network as it served, stored once (.dlbench/models/)
            keep_model(run, served.model, ctx.start_dir)
        print(f"MLflow run {run.run_id} ({run.target.uri}, experiment {run.target.experiment})")
    fixed_path.unlink()  # a scratch copy at the batch timed: the run names its source (model_sha256) and batch
    if not summary["error_pct"].notna().any():
        reasons = "; ".join(f"{engine}: {why}" for engine, why in problems.items())
        raise TaskFailed(f"no engine was both predicted and measured: {reasons}")
    return 0


@dataclass(frozen=True)
class Rounds:
    """An inference evaluation's rounds (``evaluate.rounds``: end to end, benchmarks, end to end, ...): the
    combined measurements per engine, the end-to-end measurement pooled over the rounds, and each round's
    benchmark medians and end-to-end median per engine."""

    measured: dict[str, dict[int, Measurement]]
    implementations: dict[str, dict[int, str]]
    errors: dict[str, str]
    end_to_end: EndToEnd
    medians: dict[str, list[dict[int, float]]]
    measured_ms: dict[str, list[float]]


def _measure_rounds(
    cfg: DlbenchConfig, ctx: AppContext, operations: list[Operation], settings: RunSettings, device: str,
    run: TrackedRun, model: Path, engines: list[str], workdir: Path,
) -> Rounds:  # fmt: skip
    """The model timed end to end, then every engine's operator benchmarks, in ``evaluate.rounds`` rounds, each
    with its share of the repetitions (:mod:`dlbench.operators.step_rounds`), so a slow spell lands on both."""
    count = cfg.evaluate.rounds
    per_round, samples, whole = [], [], []
    for index in range(count):
        share = step_round_settings(settings, count, index)
        log.info("timing %s end to end on %s (round %d of %d)", model.stem, ", ".join(engines), index + 1, count)
        whole.append(measure_end_to_end(model, engines, share, workdir if count == 1 else workdir / f"r{index + 1}"))
        measured, implementations, errors, found = _measure_engines(cfg, ctx, operations, share, device, run,
                                                                    (count, index))  # fmt: skip
        per_round.append(measured)
        samples.append(found)
    combined = {e: combine_step_rounds([r[e] for r in per_round], [s[e] for s in samples], settings)
                for e in ENGINE_BACKENDS}  # fmt: skip
    failed = {e: why for e, why in errors.items() if not any(m.ok for m in combined[e].values())}
    medians = {e: round_medians([r[e] for r in per_round]) for e in ENGINE_BACKENDS}
    measured_ms = {e: [w.stats[e].median_ms if e in w.stats else float("nan") for w in whole] for e in engines}
    return Rounds(combined, implementations, failed, _pooled(whole, settings), medians, measured_ms)


def _pooled(whole: list[EndToEnd], settings: RunSettings) -> EndToEnd:
    """The end-to-end measurements of the rounds as one: each engine's samples pooled, each probe (a session
    run's fixed cost, ...) the median of the rounds'; the other facts the last round's."""
    if len(whole) == 1:
        return whole[0]
    files = tuple(f for w in whole for f in w.files)
    stats = {e: TimeStats.from_samples(v, settings.target_rel_ci) for e, v in end_to_end_samples(files).items() if v}
    errors = {e: why for w in whole for e, why in w.errors.items() if e not in stats}
    probes = [w.facts.get("probes", {}) for w in whole]  # each round's, on its share of the repetitions
    median = {k: statistics.median(p[k] for p in probes if k in p) for k in dict.fromkeys(k for p in probes for k in p)}
    return EndToEnd(stats, errors, {**whole[-1].facts, "probes": median}, files)


def _with_rounds(run: TrackedRun, table: pd.DataFrame, rounds: Rounds, metrics: dict[str, float],
                 summary: pd.DataFrame, overheads: dict) -> tuple[dict[str, float], pd.DataFrame]:  # fmt: skip
    """Each engine's error paired by round with its interval (``inference_rounds.csv``, the metrics
    ``engine/<engine>/error_lo_pct`` / ``error_hi_pct``); an engine not measured in the rounds keeps its own."""
    frames = []
    for engine, measured_ms in rounds.measured_ms.items():
        predicted = metrics.get(f"engine/{engine}/predicted_ms")
        if predicted is None or f"{engine}_term_ms" not in table:
            continue
        frame = engine_rounds(table, engine, rounds.medians[engine], measured_ms, predicted,
                              sum(overheads.get(engine, {}).values()))  # fmt: skip
        metrics = {**metrics, **engine_round_metrics(engine, frame)}
        frames.append(frame)
    if frames:
        run.log_table(pd.concat(frames, ignore_index=True), "inference_rounds.csv")
    return metrics, with_round_intervals(summary, metrics)


def _model_file(cfg: DlbenchConfig, ctx: AppContext) -> Path:
    paths = model_paths(cfg, ctx)
    if len(paths) != 1:
        raise ConfigurationError(f"task=evaluate predicts one model at a time, got {len(paths)}: give model=X.onnx")
    return paths[0]


def _served_script(cfg: DlbenchConfig, ctx: AppContext, settings: RunSettings, workdir: Path) -> ServedScript:
    """Run the registered training script once, asking its instrumentation to serve the real network (eval
    mode, ``torch.inference_mode``, compiled with ``evaluate.compile``) on its own batch and to export it."""
    assert cfg.benchmark is not None
    if cfg.benchmark.kind != "training" or cfg.model:
        raise ConfigurationError(
            "task=evaluate evaluate.mode=inference serves a training benchmark's network (+benchmark=resnet_cifar) "
            "or a model file (model=X.onnx), one of the two"
        )
    entry, arguments = training_entry(cfg, load_registry(ctx.config_dirs))
    samples = workdir / "served" / f"{entry.name}.csv"
    samples.unlink(missing_ok=True)
    env = {
        **settings.environment(),
        serve.ENV_SERVE: str(samples),
        serve.ENV_COMPILE: "1" if cfg.evaluate.compile else "",
    }
    log.info("training %s briefly to serve its network in eval mode", entry.name)
    trained = run_training(cfg, entry, arguments, workdir / "script", extra_env=env)
    failed = samples.with_name(samples.name + ".error")
    if not samples.exists():
        why = failed.read_text(encoding="utf-8").strip().splitlines()[-1:] if failed.exists() else []
        reason = why[0] if why else "the script never handed its network and batch to the instrumentation"
        raise TaskFailed(f"{entry.name}: the served network was not timed: {reason}")
    frame = pd.read_csv(samples)
    batch_size = int(trained.facts.get("observed", {}).get("batch_size", cfg.batch_size))
    engine = str(frame["engine"].iloc[0])
    stats = TimeStats.from_samples(list(frame["ms"]), settings.target_rel_ci)
    return ServedScript(serve.served_model_path(samples), batch_size, stats, engine)


def _measure_engines(
    cfg: DlbenchConfig,
    ctx: AppContext,
    operations: list[Operation],
    settings: RunSettings,
    device: str,
    run: TrackedRun,
    where: tuple[int, int] = (1, 0),
) -> tuple[dict[str, dict[int, Measurement]], dict[str, dict[int, str]], dict[str, str], dict[str, dict]]:
    """Each engine's operator benchmarks, on their own: one engine's failure is its own (named), and each
    engine's operators are logged as soon as they are measured, so a later failure loses none of them."""
    registry = load_registry(ctx.config_dirs)
    measured: dict[str, dict[int, Measurement]] = {}
    implementations: dict[str, dict[int, str]] = {}
    samples: dict[str, dict[int, list[float]]] = {}
    errors: dict[str, str] = {}
    for engine, backend in ENGINE_BACKENDS.items():
        samples[engine] = {}
        try:
            measured[engine], implementations[engine] = _measure_engine(
                engine,
                backend,
                registry,
                operations,
                replace(settings, caches=cfg.evaluate.caches if backend == "torch" else "hot"),
                device,
                run,
                ctx,
                cfg.quiet,
                where,
                samples[engine],
            )
        except (TaskFailed, OSError) as err:
            log.error("the %s prediction's operator benchmarks failed: %s", engine, err)
            measured[engine], implementations[engine], errors[engine] = {}, {}, str(err)
        part = inference_table(operations, {engine: measured[engine]}, {engine: implementations[engine]})
        run.log_metrics({f"engine/{engine}/operators_ms": float(part[f"{engine}_term_ms"].sum(skipna=True))},
                        step=where[1])  # fmt: skip
    return measured, implementations, errors, samples


def _measure_engine(
    engine: str,
    backend: str,
    registry: Registry,
    operations: list[Operation],
    settings: RunSettings,
    device: str,
    run: TrackedRun,
    ctx: AppContext,
    quiet: bool,
    where: tuple[int, int],
    samples: dict[int, list[float]],
) -> tuple[dict[int, Measurement], dict[int, str]]:
    """The operator benchmarks of one engine's prediction in round ``where`` (rounds, index): measurement and
    benchmark name per operation; its raw samples added to ``samples`` when there are several rounds."""
    measured: dict[int, Measurement] = {}
    implementations: dict[int, str] = {}
    plan = plan_benchmarks(registry, operations, backend, device)
    for entry, ops in plan.assignments:
        log.info("measuring %d operations with %s for the %s prediction", len(ops), entry.name, engine)
        stem = f"{entry.name}_inference" + (f"_r{where[1] + 1}" if where[0] > 1 else "")
        result, files = measure_with_progress(entry, ops, settings, ctx.output_dir / "protocol", stem, quiet)
        run.log_files(files.existing(), "protocol")
        if where[0] > 1:
            samples.update(round_samples(files.samples_csv))
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
        for op in ops:
            measured[op.id] = result.measurements[op.id]
            implementations[op.id] = entry.name
    return measured, implementations


def _as_the_session_runs(
    run: TrackedRun,
    model: Path,
    settings: RunSettings,
    workdir: Path,
    end_to_end: EndToEnd,
    metrics: dict[str, float],
    summary: pd.DataFrame,
) -> tuple[dict[str, float], pd.DataFrame]:
    """onnxruntime predicted from the nodes its session executes (the optimized graph), the original-node
    prediction kept as ``engine/onnxruntime/original_nodes/...``; unchanged when the nodes cannot be timed."""
    log.info("timing the nodes of %s's optimized onnxruntime graph", model.name)
    nodes = measure_session_nodes(model, settings, workdir)
    for file in nodes.files:
        run.log_artifact(file, "end_to_end")
    if nodes.error:
        log.warning("onnxruntime is predicted from the original nodes only: %s", nodes.error)
        run.set_tags({"dlbench.engine.onnxruntime.session_nodes": nodes.error[:500]})
        return metrics, summary
    session = session_prediction(nodes.rows, end_to_end.facts, end_to_end.stats.get("onnxruntime"))
    return with_session_prediction(metrics, summary, session)


def _log_problems(run: TrackedRun, problems: dict[str, str]) -> None:
    """An engine that cannot be predicted or measured, named with its reason: a tag per engine
    (``dlbench.engine.<engine>.unable``), the list in ``dlbench.engines_unable`` and the run's description."""
    if not problems:
        return
    lines = [f"- {engine}: {why}" for engine, why in problems.items()]
    run.set_tags({
        **{f"dlbench.engine.{engine}.unable": why for engine, why in problems.items()},
        "dlbench.engines_unable": ",".join(problems),
        "mlflow.note.content": "Engines not fully evaluated (the others' figures stand):\n" + "\n".join(lines),
    })  # fmt: skip
    for engine, why in problems.items():
        log.warning("%s cannot be evaluated fully: %s", engine, why)
