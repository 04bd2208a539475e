"""An evaluation's benchmark rounds (``evaluate.rounds``): the step's operations are measured once per round,
between the script's trainings, each round with its share of the repetitions (:func:`round_share`, as
interleaved rounds divide them) and a new shuffled order; the rounds are then combined into one measurement
per operation as interleaved rounds are (:func:`dlbench.operators.rounds.combine_rounds`), and each round's own
median is kept for the round's prediction (:mod:`dlbench.analysis.step_interval`)."""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from dlbench.core.contention import contention_limit
from dlbench.core.values import Measurement
from dlbench.operators.launch import read_launch_ms
from dlbench.operators.protocol import read_samples
from dlbench.operators.rounds import RoundResult, combine_rounds, round_share
from dlbench.operators.runner import RunSettings


def step_round_settings(settings: RunSettings, rounds: int, index: int) -> RunSettings:
    """The settings of benchmark round ``index`` (0-based) of ``rounds``: the repetitions and time limits
    divided between the rounds, and ``measure.rounds`` interleaved rounds divided too (at least one each), so
    the evaluation costs about what one sweep did."""
    if rounds <= 1:
        return settings
    inner = max(1, round(settings.rounds / rounds))
    return replace(settings, **round_share(settings, rounds, index), rounds=inner)


def step_round_stem(name: str, rounds: int, index: int) -> str:
    """The protocol files' stem of benchmark ``name`` in round ``index``: ``<name>_evaluate`` in one round."""
    return f"{name}_evaluate" if rounds <= 1 else f"{name}_evaluate_r{index + 1}"


def round_samples(samples_csv: Path | None) -> dict[int, list[float]]:
    """The raw samples (ms) a round's sweep wrote, by operation id; none when it wrote no samples file."""
    if samples_csv is None or not samples_csv.exists():
        return {}
    return read_samples(samples_csv)[0]


def combine_step_rounds(
    per_round: Sequence[Mapping[int, Measurement]],
    samples: Sequence[Mapping[int, Sequence[float]]],
    settings: RunSettings,
) -> dict[int, Measurement]:
    """One measurement per operation from its measurements in each round (``samples``: each round's raw
    samples by id, pooled where every round has them): the rounds in which it was measured, combined; an
    operation measured in no round keeps its last round's failure (or ``unsupported``)."""
    if len(per_round) == 1:
        return dict(per_round[0])
    limit = contention_limit(settings.device, settings.contended_below)
    combined: dict[int, Measurement] = {}
    ids = dict.fromkeys(op_id for round_ in per_round for op_id in round_)  # every round's, in order
    for op_id in ids:
        found, failures = [], []
        for index, (round_measurements, round_samples_) in enumerate(zip(per_round, samples, strict=True)):
            m = round_measurements.get(op_id)
            if m is None:
                continue
            if m.ok and m.stats is not None:
                found.append(RoundResult(index, 0, m.stats, tuple(round_samples_.get(op_id, ())), m.cpu_efficiency))
            elif m.error:
                failures.append(f"round {index + 1}: {m.error}")
        if not found:  # its last round's failure
            combined[op_id] = next(r[op_id] for r in reversed(per_round) if op_id in r)
            continue
        m = combine_rounds(op_id, found, len(per_round), settings.target_rel_ci, settings.min_reps, limit)
        if failures and m.stats is not None:
            m = replace(m, stats=m.stats.with_note("failed in " + "; ".join(failures)))
        combined[op_id] = m
    return combined


def step_launch_ms(protocol_dir: Path, rounds: int) -> dict[int, float]:
    """A GPU step's host ms of issuing one call by operation id (:func:`dlbench.operators.launch.read_launch_ms`):
    the median over the benchmark rounds that wrote one."""
    if rounds <= 1:
        return read_launch_ms(protocol_dir)
    found: dict[int, list[float]] = {}
    for index in range(rounds):
        for op_id, ms in read_launch_ms(protocol_dir, f"*{step_round_stem('', rounds, index)}_out.csv").items():
            found.setdefault(op_id, []).append(ms)
    return {op_id: statistics.median(values) for op_id, values in found.items()}


def end_to_end_samples(files: Sequence[Path]) -> dict[str, list[float]]:
    """The end-to-end samples (ms) per engine in a whole-model measurement's files (``*_end_to_end.csv``)."""
    samples: dict[str, list[float]] = {}
    for path in files:
        if path.name.endswith("_end_to_end.csv") and path.exists():
            with path.open(encoding="utf-8") as handle:
                for row in csv.DictReader(handle):
                    samples.setdefault(row["engine"], []).append(float(row["ms"]))
    return samples


def round_medians(per_round: Sequence[Mapping[int, Measurement]]) -> list[dict[int, float]]:
    """Each round's median ms per operation it measured (NaN-free: the others are left out)."""
    return [
        {
            op_id: m.stats.median_ms
            for op_id, m in round_.items()
            if m.ok and m.stats and math.isfinite(m.stats.median_ms)
        }
        for round_ in per_round
    ]
