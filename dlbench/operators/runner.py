"""Measure a list of operations with one operator benchmark through the executable protocol."""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from dlbench.config import DlbenchConfig
from dlbench.core.allocator import allocator_environment
from dlbench.core.contention import contention_limit
from dlbench.core.cores import resolve_threads, thread_environment
from dlbench.core.errors import ConfigurationError
from dlbench.core.interference import InterferenceWatch
from dlbench.core.process import STDERR_KEEP_BYTES
from dlbench.core.settings import EXECUTABLE_SETTINGS, default, to_environment
from dlbench.core.values import Measurement, Operation, SweepResult
from dlbench.operators.invocation import Invocation, align_rows, invoke_once
from dlbench.operators.protocol import ids_written, output_path_for, samples_path_for
from dlbench.operators.reference import TRIAD_NAME, machine_triad_elements, probe_settings, release_triad, triad_ms
from dlbench.operators.registry import OperatorBenchmark
from dlbench.operators.rounds import (
    AroundRound,
    RoundLoop,
    RoundResult,
    combine_rounds,
    measured_again,
    probe_report,
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
    #: more environment variables for the executable (a comparison's side: ``compare.b.env``), set last
    extra_env: tuple[tuple[str, str], ...] = ()
    #: copies of the executable running an invocation's rows beside it (:mod:`dlbench.operators.beside`)
    beside: int = 0

    def environment(self) -> dict[str, str]:
        """The ``DLBENCH_*`` variables of :mod:`dlbench.core.settings` (and OpenMP's thread count), then
        ``extra_env``."""
        keys = [s.key for s in EXECUTABLE_SETTINGS if s.key != "verify"]  # not rounds: the runner's own
        env = to_environment({key: getattr(self, key) for key in keys})
        env.update(thread_environment(self.threads))
        env.update(allocator_environment(self.keep_heap))
        env.update(dict(self.extra_env))
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
    around_round: AroundRound | None = None,
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
    sweep, measurements, files = _prepared(benchmark, operations, settings, workdir, stem, on_poll, probe)
    if sweep is None:
        return SweepResult(measurements, run_error="no operation could be aligned to param_descr"), files
    with sweep.watch:
        try:
            sweep.loop.run(around_round)
            sweep.measure_contended_again()
        except KeyboardInterrupt as err:  # also SIGTERM (RunInterrupted), see core.interrupts
            if not sweep.stopped:
                sweep.stopped.append(type(err).__name__)
    return sweep.result(measurements), files


def _prepared(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    settings: RunSettings,
    workdir: Path,
    stem: str | None,
    on_poll: Callable[[], None] | None,
    probe: Sequence[tuple[OperatorBenchmark, Operation]],
) -> tuple[_Sweep | None, dict[int, Measurement], SweepFiles]:
    """A sweep ready to run (None when no operation fits the benchmark), the misfits, its files; the files of
    an earlier sweep of the same name removed."""
    files = sweep_files(workdir, stem or benchmark.name)
    workdir.mkdir(parents=True, exist_ok=True)
    rows, measurements = align_rows(benchmark, operations)
    if not rows:
        return None, measurements, files
    base = files.input_csv.stem
    for old in [*workdir.glob(f"{base}_round*"), *workdir.glob(f"{base}_again*"), *workdir.glob(f"{base}_probe*")]:
        old.unlink(missing_ok=True)
    files.output_csv.unlink(missing_ok=True)
    if rounds_for(settings, len(rows)) > 1:
        files = replace(files, rounds_csv=workdir / f"{base}_rounds.csv")
    return _Sweep(benchmark, operations, rows, settings, files, on_poll, probe), measurements, files


@dataclass(frozen=True)
class Side:
    """One side of a comparison measured in the same rounds as the other: its benchmark, operations, settings
    and the stem of its protocol files."""

    benchmark: OperatorBenchmark
    operations: Sequence[Operation]
    settings: RunSettings
    stem: str


def balanced_orders(rounds: int, rng: random.Random) -> tuple[str, ...]:
    """Which side runs first in each of ``rounds`` rounds: A first in half of them and B first in the other half
    (one more either way when odd), in a random order. A coin per round could give one side the first place 12
    times in 20; whatever the first place costs or gains (it runs right after the probe) would then not cancel
    in the paired ratio."""
    firsts = ["AB"] * (rounds // 2) + ["BA"] * (rounds // 2) + ([rng.choice(("AB", "BA"))] if rounds % 2 else [])
    rng.shuffle(firsts)
    return tuple(firsts)


def measure_interleaved(
    a: Side,
    b: Side,
    workdir: Path,
    probe: Sequence[tuple[OperatorBenchmark, Operation]] = (),
    seed: int | None = None,
) -> tuple[tuple[SweepResult, SweepFiles], tuple[SweepResult, SweepFiles], tuple[str, ...]]:
    """A and B in one run: each of A's rounds (:class:`RoundLoop`) runs B's round of the same index right
    before or right after it (through A's ``around_round`` hook, in a random order per round), so the two
    sides of a round see the same machine. Each side is then finished as :func:`measure_operations` finishes a
    sweep. ``probe``: read at each round's start (A's loop). The results and files of A and B, and per round
    which side ran first (``"AB"`` or ``"BA"``, :func:`balanced_orders`)."""
    rng = random.Random(seed if seed is not None else random.SystemRandom().randrange(2**32))
    prepared = [_prepared(s.benchmark, s.operations, s.settings, workdir, s.stem, None, p)
                for s, p in ((a, probe), (b, ()))]  # fmt: skip
    (sweep_a, found_a, files_a), (sweep_b, found_b, files_b) = prepared
    if sweep_a is None or sweep_b is None:
        raise ConfigurationError(
            f"{(a if sweep_a is None else b).benchmark.name}: no operation could be aligned to its param_descr"
        )
    if sweep_a.rounds != sweep_b.rounds:
        raise ConfigurationError(f"A and B must run as many rounds, got {sweep_a.rounds} and {sweep_b.rounds}")
    orders = balanced_orders(sweep_a.rounds, rng)

    def around(index: int, stage: str) -> None:
        if stage == ("before" if orders[index] == "BA" else "after"):
            sweep_b.loop.round(index)

    with sweep_a.watch, sweep_b.watch:
        try:
            sweep_a.loop.run(around)
            sweep_a.measure_contended_again()
            sweep_b.measure_contended_again()
        except KeyboardInterrupt as err:  # also SIGTERM (RunInterrupted), see core.interrupts
            for sweep in (sweep_a, sweep_b):
                if not sweep.stopped:
                    sweep.stopped.append(type(err).__name__)
    return (sweep_a.result(found_a), files_a), (sweep_b.result(found_b), files_b), orders


class _Sweep:
    """One call of :func:`measure_operations`: what its rounds, probes and re-measurement found so far."""

    def __init__(
        self,
        benchmark: OperatorBenchmark,
        operations: Sequence[Operation],
        rows: list,
        settings: RunSettings,
        files: SweepFiles,
        on_poll: Callable[[], None] | None,
        probe: Sequence[tuple[OperatorBenchmark, Operation]],
    ) -> None:
        self.benchmark, self.operations, self.rows, self.settings, self.files = (
            benchmark,
            operations,
            rows,
            settings,
            files,
        )
        self.on_poll, self.probe = on_poll, probe
        self.workdir, self.base = files.input_csv.parent, files.input_csv.stem
        self.rounds = rounds_for(settings, len(rows))
        self.limit = contention_limit(settings.device, settings.contended_below)
        # set as the first invocation starts: the interference probe's time is not the program's
        self.deadline = math.inf
        self.current = files.output_csv
        self.watch = InterferenceWatch(
            settings.threads, settings.device, lambda: ids_written(self.current), benchmark.name
        )
        self.loop = RoundLoop(rows, self.rounds, settings, self.measure_round, self.probe_now if probe else None,
                              lambda: time.perf_counter() >= self.deadline)  # fmt: skip
        self.seed, self.results, self.failures = self.loop.seed, self.loop.results, self.loop.failures
        self.again: dict[int, RoundResult] = {}
        self.run_errors: list[str] = []
        self.probe_ms: dict[str, list[float]] = {}
        self.stderr_parts: list[str] = []
        self.stopped: list[str] = []  # the interrupt's kind, as the interrupted invocation saw it
        self.seconds = 0.0

    def invoke(self, entry: OperatorBenchmark, ops: Sequence[Operation], todo: list, share: RunSettings,
               files: SweepFiles) -> Invocation:  # fmt: skip
        if self.deadline == math.inf:
            self.deadline = time.perf_counter() + self.settings.timeout_s
        remaining = max(self.deadline - time.perf_counter(), 0.1)
        inv = invoke_once(entry, ops, todo, replace(share, timeout_s=remaining), files, self.on_poll)
        self.seconds += inv.process.seconds
        if entry is self.benchmark:
            self.stderr_parts.append(inv.process.stderr)
            self.run_errors.extend(e for e in inv.run_errors if e not in self.run_errors)
        if inv.interrupted:
            self.stopped.append(inv.interrupt)
        return inv

    def probe_now(self, share: RunSettings, label: str) -> None:
        # a probe reading needs its median to a percent or two, not the operations' settings: ~0.1 s each; the
        # first one warms up longer (a worker's first calls of a kernel run slow: set-up, not drift), the later
        # ones 3 calls (the first two after a kernel's set-up run slow: see rounds.round_share)
        light = replace(
            probe_settings(share), warmup=10 if label == "round1" else 3, min_reps=min(share.min_reps, 10),
            min_time_s=min(share.min_time_s, 0.05), max_time_s=min(share.max_time_s, 0.1),
        )  # fmt: skip
        for entry, op in self.probe:
            probe_rows = align_rows(entry, [op])[0]
            inv = self.invoke(
                entry, [op], probe_rows, light, sweep_files(self.workdir, f"{self.base}_probe{op.id}_{label}")
            )
            if op.id in inv.stats:
                self.probe_ms.setdefault(op.label, []).append(inv.stats[op.id].median_ms)
            if inv.interrupted:
                raise KeyboardInterrupt
        if self.settings.device == "cpu":  # the memory probe beside the compute probe (operators/reference.py)
            self.probe_ms.setdefault(TRIAD_NAME, []).append(triad_ms(machine_triad_elements()))

    def measure_round(self, index: int, order: list, share: RunSettings) -> Invocation:
        """One round's invocation of the benchmark over ``order`` (the loop: :class:`RoundLoop`)."""
        this_round = self.files if self.rounds == 1 else round_files(self.workdir, self.base, index, self.rounds)
        self.current = this_round.output_csv
        return self.invoke(self.benchmark, self.operations, order, share, this_round)

    def combined(self) -> dict[int, Measurement]:
        s = self.settings
        return {
            op_id: combine_rounds(op_id, found, self.rounds, s.target_rel_ci, s.min_reps, self.limit)
            for op_id, found in self.results.items()
        }

    def measure_contended_again(self) -> None:
        """Once, with the whole share, at the sweep's end: the operations whose threads waited in every round."""
        so_far = self.combined()
        waited = [op for op in self.operations if op.id in so_far and so_far[op.id].contended]
        if not waited or time.perf_counter() >= self.deadline:
            return
        redo_rows = [row for row in self.rows if row[0] in {op.id for op in waited}]
        files = sweep_files(self.workdir, f"{self.base}_again")
        inv = self.invoke(self.benchmark, waited, redo_rows, self.settings, files)
        for op in waited:
            if op.id in inv.stats:
                self.again[op.id] = RoundResult(self.rounds, 0, inv.stats[op.id], tuple(inv.samples.get(op.id, ())),
                                                inv.efficiency.get(op.id), inv.launch.get(op.id))  # fmt: skip
        if inv.interrupted:
            raise KeyboardInterrupt

    def result(self, measurements: dict[int, Measurement]) -> SweepResult:
        """Every operation's measurement (or why it has none), the combined files, the run's extras."""
        for op_id, m in self.combined().items():
            if op_id in self.again or m.contended:
                m = measured_again(m, self.again.get(op_id), self.limit)
            if op_id in self.failures and m.stats is not None:
                m = replace(m, stats=m.stats.with_note(f"failed in a round: {self.failures[op_id]}"))
            measurements[op_id] = m
        interrupted = bool(self.stopped)
        for op_id, _ in self.rows:
            if op_id not in measurements:
                measurements[op_id] = Measurement(op_id, None, self.failures.get(op_id) or (
                    "not measured: the sweep was interrupted" if interrupted
                    else f"not measured: the timeout of {self.settings.timeout_s:g} s was spent before its round"
                ))  # fmt: skip
        stderr = "".join(self.stderr_parts)
        if len(stderr) > STDERR_KEEP_BYTES:  # each round's tail is bounded; so is their sum
            dropped = len(stderr) - STDERR_KEEP_BYTES
            stderr = f"[... {dropped} earlier characters dropped ...]\n{stderr[-STDERR_KEEP_BYTES:]}"
        release_triad()
        if self.rounds > 1:
            write_combined(self.files, self.rows, self.results, self.again, measurements, self.limit, stderr, self.seed)
        ordered = {op.id: measurements[op.id] for op in self.operations}
        extra = {
            "seconds": self.seconds,
            "rounds": self.rounds,
            **({"interrupt": self.stopped[0]} if interrupted else {}),
        }
        extra.update(probe_report(self.probe_ms, ordered))
        return SweepResult(ordered, run_error="\n".join(self.run_errors), stderr=stderr, interrupted=interrupted,
                           extra=extra, interference=self.watch.report)  # fmt: skip


def run_settings(cfg: DlbenchConfig, device: str) -> RunSettings:
    """What a sweep of ``cfg`` tells its executables: every ``measure.*`` setting RunSettings has, and the run's."""
    measured = {f.name: getattr(cfg.measure, f.name) for f in fields(RunSettings) if hasattr(cfg.measure, f.name)}
    return RunSettings(
        **measured,
        threads=resolve_threads(cfg.threads),  # 0: all physical cores, decided here so the run records it
        device=device,
        dtype=cfg.dtype,
        fp32_math=cfg.fp32_math,
        timeout_s=cfg.timeout,
        keep_heap=cfg.keep_heap,
    )
