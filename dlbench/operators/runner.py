"""Measure a list of operations with one operator benchmark through the executable protocol."""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlbench.config import DlbenchConfig
from dlbench.core.allocator import allocator_environment
from dlbench.core.contention import contention_limit
from dlbench.core.cores import resolve_threads, thread_environment
from dlbench.core.interference import InterferenceWatch
from dlbench.core.process import STDERR_KEEP_BYTES
from dlbench.core.settings import EXECUTABLE_SETTINGS, default, to_environment
from dlbench.core.values import Measurement, Operation, SweepResult
from dlbench.operators.invocation import Invocation, align_rows, invoke_once
from dlbench.operators.protocol import ids_written, output_path_for, samples_path_for
from dlbench.operators.registry import OperatorBenchmark
from dlbench.operators.rounds import (
    RoundResult,
    combine_rounds,
    measured_again,
    probe_report,
    round_orders,
    round_share,
    write_combined,
)


@dataclass(frozen=True)
class RunSettings:
    """What an executable is told through the environment, and how long it may take."""

    warmup: int = int(default("warmup"))
    min_reps: int = int(default("min_reps"))
    max_reps: int = int(default("max_reps"))
    min_time_s: float = float(default("min_time_s"))
    target_rel_ci: float = float(default("target_rel_ci"))
    max_time_s: float = float(default("max_time_s"))
    threads: int = int(default("threads"))
    device: str = str(default("device"))
    dtype: str = str(default("dtype"))
    fp32_math: str = str(default("fp32_math"))
    timeout_s: float = 600.0
    op_budget_s: float = float(default("op_budget_s"))
    memory_fraction: float = float(default("memory_fraction"))
    caches: str = str(default("caches"))
    #: start the executable with the allocator keeping freed memory (:mod:`dlbench.core.allocator`)
    keep_heap: bool = True
    #: interleaved rounds (:mod:`dlbench.operators.rounds`), as ``measure.rounds`` (one operation: one round)
    rounds: int = int(default("rounds"))
    #: cpu efficiency below which an operation is contended (:mod:`dlbench.core.contention`); 0: never
    contended_below: float = float(default("contended_below"))

    def environment(self) -> dict[str, str]:
        """The ``DLBENCH_*`` variables of :mod:`dlbench.core.settings` (and OpenMP's thread count)."""
        keys = [s.key for s in EXECUTABLE_SETTINGS if s.key != "verify"]  # not rounds: the runner's own
        env = to_environment({key: getattr(self, key) for key in keys})
        env.update(thread_environment(self.threads))
        env.update(allocator_environment(self.keep_heap))
        return env


@dataclass(frozen=True)
class SweepFiles:
    input_csv: Path
    output_csv: Path
    stderr_txt: Path
    samples_csv: Path | None = None
    #: every round of every operation, when measured in interleaved rounds
    rounds_csv: Path | None = None

    def existing(self) -> list[Path]:
        """The sweep's protocol files that were written (to log as artifacts)."""
        paths = (self.input_csv, self.output_csv, self.stderr_txt, self.samples_csv, self.rounds_csv)
        return [p for p in paths if p is not None and p.exists()]


def sweep_files(workdir: Path, stem: str) -> SweepFiles:
    input_csv = workdir / f"{stem}.csv"
    return SweepFiles(
        input_csv, output_path_for(input_csv), workdir / f"{stem}_stderr.txt", samples_path_for(input_csv)
    )


def rounds_for(settings: RunSettings, operations: int) -> int:
    """How many interleaved rounds a sweep of ``operations`` runs (one operation: nothing to interleave)."""
    return settings.rounds if operations > 1 else 1


def round_files(workdir: Path, stem: str, index: int, rounds: int) -> SweepFiles:
    """The protocol files of round ``index`` (0-based) of a sweep named ``stem``: the sweep's own in one round."""
    return sweep_files(workdir, stem if rounds == 1 else f"{stem}_round{index + 1}")


def failure_summary(result: SweepResult, shown_ids: int = 5, shown_reasons: int = 6) -> list[str]:
    """The failed operations as a few lines: one per distinct reason (the operation's own id taken out of
    it) with a count and the first ids, so 23 times the same problem reads as one line."""
    groups: dict[str, list[int]] = {}
    for op_id in result.failed_ids:
        error = result.measurements[op_id].error
        reason = re.sub(rf"\bid\s*[:=]?\s*{op_id}\b", "id N", re.sub(rf"\s+for id {op_id}\b", "", error))
        groups.setdefault(reason, []).append(op_id)
    lines = []
    for reason, ids in list(groups.items())[:shown_reasons]:
        if len(ids) == 1:
            lines.append(f"id {ids[0]}: {result.measurements[ids[0]].error}")
            continue
        more = f" and {len(ids) - shown_ids} more" if len(ids) > shown_ids else ""
        lines.append(f"{len(ids)} operations (ids {', '.join(map(str, ids[:shown_ids]))}{more}): {reason}")
    if len(groups) > shown_reasons:
        rest = sum(len(ids) for ids in list(groups.values())[shown_reasons:])
        lines.append(f"{rest} more operations failed for other reasons (the run's failed_operations.csv)")
    return lines


def measure_operations(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    settings: RunSettings,
    workdir: Path,
    stem: str | None = None,
    on_poll: Callable[[], None] | None = None,
    probe: Sequence[tuple[OperatorBenchmark, Operation]] = (),
    around_round: Callable[[int, str], None] | None = None,
) -> tuple[SweepResult, SweepFiles]:
    """Measure every operation with ``benchmark`` in ``settings.rounds`` interleaved rounds
    (:mod:`dlbench.operators.rounds`); every operation gets a measurement or an error.

    Nothing measured is dropped: a crash, a timeout or malformed rows fail only the operations they
    touch (an operation measured in another round keeps that round, with a note), and the run-wide problem
    is reported in ``SweepResult.run_error``. An operation whose threads waited for cores in every round is
    measured once more at the end, and stays ``contended`` if it waits again. ``probe``: reference
    operations timed at each round's start and after the last (their drift in ``SweepResult.extra``).
    ``around_round(index, "before" | "after")``: called right before and after each round's invocation (a
    comparison timed in the same rounds, as ``bench/repeatability.py`` times torch.utils.benchmark). On
    Ctrl-C or SIGTERM the executable's process group is stopped and what was measured so far is returned
    with ``interrupted=True``; the caller logs it and re-raises.
    """
    files = sweep_files(workdir, stem or benchmark.name)
    workdir.mkdir(parents=True, exist_ok=True)
    rows, measurements = align_rows(benchmark, operations)
    if not rows:
        return SweepResult(measurements, run_error="no operation could be aligned to param_descr"), files
    rounds = rounds_for(settings, len(rows))
    limit = contention_limit(settings.device, settings.contended_below)
    base = files.input_csv.stem
    for old in [*workdir.glob(f"{base}_round*"), *workdir.glob(f"{base}_again*"), *workdir.glob(f"{base}_probe*")]:
        old.unlink(missing_ok=True)
    files.output_csv.unlink(missing_ok=True)
    if rounds > 1:
        files = replace(files, rounds_csv=workdir / f"{base}_rounds.csv")
    seed = random.SystemRandom().randrange(2**32)
    orders = round_orders(rows, rounds, random.Random(seed))
    deadline = math.inf  # set as the first invocation starts: the interference probe's time is not the program's
    current = [files.output_csv]
    watch = InterferenceWatch(settings.threads, settings.device, lambda: ids_written(current[0]), benchmark.name)
    results: dict[int, list[RoundResult]] = {}
    again: dict[int, RoundResult] = {}
    failures: dict[int, str] = {}
    run_errors: list[str] = []
    probe_ms: dict[str, list[float]] = {}
    stderr_parts: list[str] = []
    stopped: list[str] = []  # the interrupt's kind, as the interrupted invocation saw it
    seconds = 0.0

    def invoke(entry, ops, todo, share, round_files) -> Invocation:
        nonlocal seconds, deadline
        if deadline == math.inf:
            deadline = time.perf_counter() + settings.timeout_s
        remaining = max(deadline - time.perf_counter(), 0.1)
        inv = invoke_once(entry, ops, todo, replace(share, timeout_s=remaining), round_files, on_poll)
        seconds += inv.process.seconds
        if entry is benchmark:
            stderr_parts.append(inv.process.stderr)
            run_errors.extend(e for e in inv.run_errors if e not in run_errors)
        if inv.interrupted:
            stopped.append(inv.interrupt)
        return inv

    def probe_now(share: RunSettings, label: str) -> None:
        # a probe reading needs its median to a percent or two, not the operations' settings: ~0.1 s each; the
        # first one warms up longer (a worker's first calls of a kernel run slow: set-up, not drift), the later
        # ones 3 calls (the first two after a kernel's set-up run slow: see rounds.round_share)
        light = replace(
            share, warmup=10 if label == "round1" else 3, min_reps=min(share.min_reps, 10),
            min_time_s=min(share.min_time_s, 0.05), max_time_s=min(share.max_time_s, 0.1),
        )  # fmt: skip
        for entry, op in probe:
            probe_rows = align_rows(entry, [op])[0]
            inv = invoke(entry, [op], probe_rows, light, sweep_files(workdir, f"{base}_probe{op.id}_{label}"))
            if op.id in inv.stats:
                probe_ms.setdefault(op.label, []).append(inv.stats[op.id].median_ms)
            if inv.interrupted:
                raise KeyboardInterrupt

    def combined() -> dict[int, Measurement]:
        return {
            op_id: combine_rounds(op_id, found, rounds, settings.target_rel_ci, settings.min_reps, limit)
            for op_id, found in results.items()
        }

    with watch:
        try:
            for index in range(rounds):
                # an operation that failed is not tried again, unless it was measured in an earlier round
                todo = [row for row in rows if row[0] not in failures or row[0] in results]
                if not todo or time.perf_counter() >= deadline:
                    break
                share = replace(settings, **round_share(settings, rounds, index))
                probe_now(share, f"round{index + 1}")
                this_round = files if rounds == 1 else round_files(workdir, base, index, rounds)
                current[0] = this_round.output_csv
                left = {row[0] for row in todo}  # without the operations that failed since
                order = [row for row in orders[index] if row[0] in left]
                if around_round is not None:
                    around_round(index, "before")
                inv = invoke(benchmark, operations, order, share, this_round)
                if around_round is not None:
                    around_round(index, "after")
                failures.update(inv.failures)
                for position, (op_id, _) in enumerate(order):
                    if op_id in inv.stats:
                        results.setdefault(op_id, []).append(RoundResult(
                            index, position, inv.stats[op_id], tuple(inv.samples.get(op_id, ())),
                            inv.efficiency.get(op_id),
                        ))  # fmt: skip
                if inv.interrupted:  # after keeping what the round measured
                    raise KeyboardInterrupt
            if results:
                probe_now(replace(settings, **round_share(settings, rounds, rounds - 1)), "end")
            so_far = combined()
            waited = [op for op in operations if op.id in so_far and so_far[op.id].contended]
            if waited and time.perf_counter() < deadline:  # once, with the whole share, at the sweep's end
                redo_rows = [row for row in rows if row[0] in {op.id for op in waited}]
                inv = invoke(benchmark, waited, redo_rows, settings, sweep_files(workdir, f"{base}_again"))
                for op in waited:
                    if op.id in inv.stats:
                        again[op.id] = RoundResult(
                            rounds, 0, inv.stats[op.id], tuple(inv.samples.get(op.id, ())), inv.efficiency.get(op.id)
                        )
                if inv.interrupted:
                    raise KeyboardInterrupt
        except KeyboardInterrupt as err:  # also SIGTERM (RunInterrupted), see core.interrupts
            if not stopped:
                stopped.append(type(err).__name__)
    for op_id, m in combined().items():
        if op_id in again or m.contended:
            m = measured_again(m, again.get(op_id), limit)
        if op_id in failures and m.stats is not None:
            m = replace(m, stats=m.stats.with_note(f"failed in a round: {failures[op_id]}"))
        measurements[op_id] = m
    interrupted = bool(stopped)
    for op_id, _ in rows:
        if op_id in measurements:
            continue
        reason = failures.get(op_id) or (
            "not measured: the sweep was interrupted" if interrupted
            else f"not measured: the timeout of {settings.timeout_s:g} s was spent before its round"
        )  # fmt: skip
        measurements[op_id] = Measurement(op_id, None, reason)
    stderr = "".join(stderr_parts)
    if len(stderr) > STDERR_KEEP_BYTES:  # each round's tail is bounded; so is their sum
        dropped = len(stderr) - STDERR_KEEP_BYTES
        stderr = f"[... {dropped} earlier characters dropped ...]\n{stderr[-STDERR_KEEP_BYTES:]}"
    if rounds > 1:
        write_combined(files, rows, results, again, measurements, limit, stderr, seed)
    ordered = {op.id: measurements[op.id] for op in operations}
    extra = {"seconds": seconds, "rounds": rounds, **({"interrupt": stopped[0]} if interrupted else {})}
    extra.update(probe_report(probe_ms, ordered))
    result = SweepResult(ordered, run_error="\n".join(run_errors), stderr=stderr, interrupted=interrupted,
                         extra=extra, interference=watch.report)  # fmt: skip
    return result, files


def run_settings(cfg: DlbenchConfig, device: str) -> RunSettings:
    m = cfg.measure
    return RunSettings(
        warmup=m.warmup,
        min_reps=m.min_reps,
        max_reps=m.max_reps,
        min_time_s=m.min_time_s,
        target_rel_ci=m.target_rel_ci,
        max_time_s=m.max_time_s,
        threads=resolve_threads(cfg.threads),  # 0: all physical cores, decided here so the run records it
        device=device,
        dtype=cfg.dtype,
        fp32_math=cfg.fp32_math,
        timeout_s=cfg.timeout,
        op_budget_s=m.op_budget_s,
        memory_fraction=m.memory_fraction,
        caches=m.caches,
        keep_heap=cfg.keep_heap,
        rounds=m.rounds,
        contended_below=m.contended_below,
    )
