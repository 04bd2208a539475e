"""Interleaved measurement: a sweep's operations are measured in rounds, each round giving every operation a
share of its repetitions in a new shuffled order (google/benchmark's ``--benchmark_enable_random_interleaving``),
so a slow spell of the machine lands on all operations rather than on the ones that ran in it; the rounds' samples
are combined into one statistic per operation. A round in which an operation's threads waited for cores
(:mod:`dlbench.core.contention`) is set aside; an operation with no other round is ``contended``. The
reference probe of :mod:`dlbench.operators.reference`, timed at every round's start and after the last, says
how far the machine's speed moved meanwhile.

Why shuffled rounds, and how many. Each round takes 1/R of a sweep of length L; in a new random order per
round an operation's share sits at a uniform place in it, so under a drift linear over the sweep its mean
place has a spread of 0.29 L / R^1.5 (0.29: a uniform place's standard deviation, of a round L / R, averaged
over R rounds): 0.29 L in one block, 0.036 L at 4 rounds, i.e. ~0.4% between operations for a 10% drift per
sweep. (Reversed pairs of orders cancel a linear drift exactly for a mean, but not for the pooled per-call
median once R > 2: tried and dropped.) What is left is drift that wanders (the machine's speed moving with a
correlation time of seconds to minutes, other work in spells): an operation's pooled median averages its R
places, so its share of the wandering falls about as 1/sqrt(R) while the shares are shorter than it. A
simulation of that (``bench/rounds_simulation.py``: log-speed wandering by 5% with a correlation time of
2-120 s, 23 operations over 60 s, per-call medians pooled) gives a per-operation spread within one sweep of
1.0-2.7% in one block, 0.4-1.5% at 4 rounds, 0.2-1.0% at 8, 0.1-0.7% at 16; two sweeps
compared carry about sqrt(2) times it.

Why 4 rounds by default: each round costs every operation its warm-up calls and its set-up (tensors, a heap
trim), the sweep one reference probe reading (two operations of ~0.1 s), and leaves ceil(min_reps / R) timed
repetitions per round (3 of the default 10 at 4 rounds, 2 at 8). And ``target_rel_ci`` is judged on each
round's own samples (the executable sees only its round): an operation whose noise needs more samples than a
round's minimum share spends up to R times what converging once takes (within ``max_time_s``), so more rounds
at the same target can cost more time, not the same; at the same time the target per round would have to
loosen by sqrt(R' / R). Part of the spread two
identical sweeps show after their common drift is the medians' own sampling error, which more repetitions
reduce and more rounds do not; ``bench/repeatability.py`` prints that part (from the medians' confidence
intervals) beside the spread, to tell the two apart before changing this default."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dlbench.core.contention import contended
from dlbench.core.values import Measurement, TimeStats
from dlbench.operators.protocol import SAMPLES_HEADER, output_header, output_row, samples_rows, write_input
from dlbench.operators.reference import Drift, consensus_pct

#: settings divided between the rounds; the rest (warm-up, target_rel_ci, threads...) stay as they are
DIVIDED = ("min_reps", "max_reps", "min_time_s", "max_time_s", "op_budget_s")


def round_share(settings: Any, rounds: int, index: int) -> dict[str, object]:
    """What changes in ``settings`` for round ``index`` (0-based) of ``rounds``: the divided settings. Every
    round keeps all its ``warmup`` calls: a round builds the operation anew (tensors, a trimmed heap), and the
    first calls after that run slow however warm the code is. Measured per call after set-up (CPU time, one
    thread, medians of 16 rounds of all 23 ResNet-50 convolutions in shuffled order, load 8-10 on 2 cores):
    call 2 took 1.7-1.9x call 12 for the 1x1 convolutions l1_reduce_in and l1_expand, 1.1-1.15x for l2_expand
    and l4_expand, call 3 within a few percent; BERT GEMMs: call 2 1.1-1.35x, call 3 up to 1.14x for the
    small batched ones. With one warm-up call, as the rounds after the first had, each later round's first
    sample was such a call."""
    if rounds <= 1:
        return {}
    share: dict[str, object] = {}
    for key in DIVIDED:
        value = getattr(settings, key)
        share[key] = max(math.ceil(value / rounds), 1) if isinstance(value, int) else value / rounds
    return share


def round_orders(items: Sequence, rounds: int, rng: random.Random) -> list[list]:
    """The order of ``items`` in each of ``rounds`` rounds: a new shuffle each round; one round keeps the
    items' own order."""
    if rounds <= 1:
        return [list(items)]
    return [rng.sample(list(items), len(items)) for _ in range(rounds)]


@dataclass(frozen=True)
class RoundResult:
    """One operation's result in one round."""

    round: int
    position: int
    stats: TimeStats
    samples: tuple[float, ...] = ()
    cpu_efficiency: float | None = None
    #: the median host ms of issuing one call, where the program wrote the protocol's launch column
    launch_ms: float | None = None


#: ``around_round(index, "before" | "after")``: called right before and after each round's invocation
AroundRound = Callable[[int, str], None]


@dataclass
class RoundLoop:
    """The rounds loop, its one owner: which rounds run, each one's share of the settings and shuffled order,
    the reference probe at each round's start and after the last, the hook around each round's invocation
    (a second side timed in the same rounds: :mod:`dlbench.tasks.compare`), and what each round kept.

    ``invoke(index, order, share)`` runs one invocation of the executable over ``order`` (the rows, in the
    round's order) with the round's settings, and returns what it gave (an
    :class:`dlbench.operators.invocation.Invocation`); ``probe(share, label)`` reads the reference probe;
    ``expired()`` says the sweep's time is spent. A round is run by :meth:`run` (every round in turn) or one at
    a time by :meth:`round` (a side driven by another side's hook)."""

    rows: Sequence[tuple[int, Sequence]]
    rounds: int
    settings: Any
    invoke: Callable[[int, list, Any], Any]
    probe: Callable[[Any, str], None] | None = None
    expired: Callable[[], bool] = lambda: False
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**32))
    results: dict[int, list[RoundResult]] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.orders = round_orders(self.rows, self.rounds, random.Random(self.seed))

    def share(self, index: int) -> Any:
        """The settings of round ``index``: the divided settings' share (:func:`round_share`)."""
        return replace(self.settings, **round_share(self.settings, self.rounds, index))

    def run(self, around_round: AroundRound | None = None) -> None:
        """Every round in turn; then the probe's last reading."""
        for index in range(self.rounds):
            if not self.round(index, around_round):
                break
        if self.results and self.probe is not None:
            self.probe(self.share(self.rounds - 1), "end")

    def round(self, index: int, around_round: AroundRound | None = None) -> bool:
        """Round ``index``: each operation in its shuffled place (an operation that failed is not tried again,
        unless an earlier round measured it); False when nothing is left to do or the time is spent. Raises
        KeyboardInterrupt after keeping what an interrupted round measured."""
        todo = [row for row in self.rows if row[0] not in self.failures or row[0] in self.results]
        if not todo or self.expired():
            return False
        share = self.share(index)
        if self.probe is not None:
            self.probe(share, f"round{index + 1}")
        left = {row[0] for row in todo}  # without the operations that failed since
        order = [row for row in self.orders[index] if row[0] in left]
        if around_round is not None:
            around_round(index, "before")
        inv = self.invoke(index, order, share)
        if around_round is not None:
            around_round(index, "after")
        self.failures.update(inv.failures)
        for position, (op_id, _) in enumerate(order):
            if op_id in inv.stats:
                self.results.setdefault(op_id, []).append(RoundResult(
                    index, position, inv.stats[op_id], tuple(inv.samples.get(op_id, ())), inv.efficiency.get(op_id),
                    inv.launch.get(op_id),
                ))  # fmt: skip
        if inv.interrupted:
            raise KeyboardInterrupt
        return True


def combined_launch_ms(used: Sequence[RoundResult]) -> float | None:
    """The host ms of issuing one call over the rounds a measurement is made of: the median of their medians
    (None when no round wrote a launch column)."""
    known = [r.launch_ms for r in used if r.launch_ms is not None]
    return statistics.median(known) if known else None


def kept_rounds(results: Sequence[RoundResult], limit: float) -> list[RoundResult]:
    """The rounds whose threads did not wait for cores."""
    return [r for r in results if not contended(r.cpu_efficiency, limit)]


def recovered(again: RoundResult | None, limit: float) -> bool:
    """Whether the measurement at the sweep's end was taken with its threads working (read, not contended)."""
    return again is not None and again.cpu_efficiency is not None and not contended(again.cpu_efficiency, limit)


def combine_stats(results: Sequence[RoundResult], target_rel_ci: float, asked_reps: int | None) -> TimeStats:
    """One statistic from several rounds: recomputed from every sample where each round has them, else the
    median of the rounds' medians (the program wrote statistics only)."""
    if len(results) == 1:
        return results[0].stats
    if all(r.samples for r in results):
        stats = TimeStats.from_samples([s for r in results for s in r.samples], target_rel_ci)
    else:
        reps = [r.stats.reps for r in results]
        mins = [r.stats.min_ms for r in results if r.stats.min_ms is not None]
        maxs = [r.stats.max_ms for r in results if r.stats.max_ms is not None]
        stats = TimeStats(
            median_ms=statistics.median(r.stats.median_ms for r in results),
            min_ms=min(mins) if mins else None,
            max_ms=max(maxs) if maxs else None,
            reps=sum(n for n in reps if n is not None) if all(n is not None for n in reps) else None,
        ).with_note(f"the median of {len(results)} rounds' medians (no samples written)")
    if asked_reps is not None and stats.reps is not None and stats.reps < asked_reps:
        stats = stats.with_note(f"{stats.reps} repetitions, {asked_reps} asked")
    return stats


def combine_rounds(
    op_id: int,
    results: Sequence[RoundResult],
    rounds: int,
    target_rel_ci: float,
    asked_reps: int | None,
    limit: float,
) -> Measurement:
    """The measurement of the rounds whose threads did not wait for cores; ``contended`` (of all rounds)
    when every round did."""
    kept = kept_rounds(results, limit)
    used = kept or list(results)
    stats = combine_stats(used, target_rel_ci, asked_reps)
    set_aside = len(results) - len(kept)
    if kept and set_aside:
        stats = stats.with_note(
            f"{set_aside} of {len(results)} rounds set aside: its threads waited for cores "
            f"(cpu efficiency below {limit:g})"
        )
    if len(results) < rounds:
        stats = stats.with_note(f"measured in {len(results)} of {rounds} rounds")
    known = [r.cpu_efficiency for r in used if r.cpu_efficiency is not None]
    efficiency = statistics.median(known) if known else None
    return Measurement(op_id, stats, cpu_efficiency=efficiency, contended=not kept)


def measured_again(first: Measurement, again: RoundResult | None, limit: float) -> Measurement:
    """A contended operation after its measurement at the sweep's end: that one when its threads worked,
    else the first, still contended."""
    if recovered(again, limit):
        assert again is not None
        note = "measured again at the sweep's end: its threads waited for cores in every round"
        return Measurement(first.operation_id, again.stats.with_note(note), cpu_efficiency=again.cpu_efficiency)
    assert first.stats is not None
    if again is None:
        note = "not measured again"
    elif again.cpu_efficiency is None:
        note = "measured again at the sweep's end, where its cpu efficiency could not be read"
    else:
        note = f"measured again at the sweep's end, still contended (cpu efficiency {again.cpu_efficiency:.2f})"
    return Measurement(
        first.operation_id, first.stats.with_note(note), cpu_efficiency=first.cpu_efficiency, contended=True
    )


def probe_report(probe_ms: Mapping[str, Sequence[float]], measurements: Mapping[int, Measurement]) -> dict[str, Any]:
    """The reference probe's readings over the sweep as metrics (``machine_drift_pct``: last reading against
    the first, as an evaluation's; ``machine_drift_max_pct``: the largest move from the first) and a note
    when it moved more than the operations' own spread (the median half-width of their medians' 95%
    intervals, ``operations_spread_pct``)."""
    readings = {name: list(values) for name, values in probe_ms.items() if len(values) >= 2}
    if not readings:
        return {}
    drift = Drift({n: v[0] for n, v in readings.items()}, {n: v[-1] for n, v in readings.items()})
    # at each reading, the move every reference agrees on (one reference alone moving is its reading's noise)
    count = min(len(v) for v in readings.values())
    moves = [consensus_pct((v[i] / v[0] - 1.0) * 100.0 for v in readings.values() if v[0] > 0) for i in range(1, count)]
    largest = max(moves, key=abs) if moves else math.nan
    metrics = {**drift.metrics(), "machine_drift_max_pct": largest}
    spreads = [m.stats.rel_ci for m in measurements.values() if m.ok and m.stats and m.stats.rel_ci is not None]
    spread = statistics.median(spreads) * 100.0 if spreads else math.nan
    if math.isfinite(spread):
        metrics["operations_spread_pct"] = spread
    report: dict[str, Any] = {"drift_metrics": {k: v for k, v in metrics.items() if math.isfinite(v)}}
    if math.isfinite(largest) and math.isfinite(spread) and abs(largest) > spread:
        per_probe = ", ".join(f"{n} {' -> '.join(f'{ms:.3g}' for ms in v)} ms" for n, v in readings.items())
        report["drift_note"] = (
            f"the machine's speed moved {largest:+.1f}% during the sweep (reference probe: {per_probe}), more "
            f"than the operations' own spread (median +-{spread:.1f}%): absolute times carry that drift; the "
            "interleaved rounds spread it over all operations, so their ratios hold better than their times"
        )
    return report


def used_rounds(results: Sequence[RoundResult], again: RoundResult | None, limit: float) -> list[RoundResult]:
    """The rounds an operation's measurement is made of (as :func:`combine_rounds` and
    :func:`measured_again` choose them)."""
    if recovered(again, limit):
        assert again is not None
        return [again]
    return kept_rounds(results, limit) or list(results)


def write_combined(
    files: Any,
    rows: Sequence[tuple[int, Sequence]],
    results: Mapping[int, Sequence[RoundResult]],
    again: Mapping[int, RoundResult],
    measurements: Mapping[int, Measurement],
    limit: float,
    stderr: str,
    seed: int,
) -> None:
    """The protocol's files of a sweep measured in rounds, as if one invocation had written them: the input
    in the operations' order, the statistics (``_out.csv``, with the launch column where a round wrote one:
    the GPU timeline's host times) and the samples they were computed from, and
    ``_rounds.csv`` with every round of every operation (its place in the round's order, median, cpu
    efficiency, whether it was kept); each round's own files stay beside them."""
    write_input(files.input_csv, rows)
    files.stderr_txt.write_text(stderr, encoding="utf-8")
    with (
        files.output_csv.open("w", encoding="utf-8") as out,
        files.samples_csv.open("w", encoding="utf-8") as samples,
        files.rounds_csv.open("w", encoding="utf-8") as table,
    ):
        launch = any(r.launch_ms is not None for found in results.values() for r in found)
        out.write(output_header(launch=launch))
        samples.write(SAMPLES_HEADER)
        table.write(f"# interleaving seed {seed}\nid,round,position,median_ms,reps,cpu_efficiency,kept\n")
        for op_id, _ in rows:
            found = results.get(op_id, ())
            used = used_rounds(found, again.get(op_id), limit) if found else []
            m = measurements[op_id]
            if m.stats is not None and m.error == "":
                issuing = combined_launch_ms(used) if launch else False
                out.write(output_row(op_id, m.stats, cpu_efficiency=m.cpu_efficiency, launch_ms=issuing))
                samples.write(samples_rows(op_id, [s for r in used for s in r.samples]))
            for r in [*found, *([again[op_id]] if op_id in again else [])]:
                cells = [op_id, r.round + 1 if r is not again.get(op_id) else "again", r.position + 1,
                         f"{r.stats.median_ms:.7g}", "" if r.stats.reps is None else r.stats.reps,
                         "" if r.cpu_efficiency is None else f"{r.cpu_efficiency:.4f}", int(r in used)]  # fmt: skip
                table.write(",".join(map(str, cells)) + "\n")
