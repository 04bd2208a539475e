"""B against A timed in the same rounds: a slow spell common to both sides of a round cancels, a real
slowdown is found, and Holm's correction keeps the chance of any false alarm among many operations at the
confidence level's alpha (simulated A/A comparisons), where uncorrected intervals raise one most times."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlbench.analysis.comparison.change import ChangeSettings, holm
from dlbench.analysis.comparison.interleaved import interleaved_changes


def _rounds(times: np.ndarray) -> pd.DataFrame:
    """A ``_rounds.csv`` from an (operations x rounds) array of medians, every round kept."""
    return pd.DataFrame([{"id": i, "round": r + 1, "median_ms": t, "kept": 1} for (i, r), t in np.ndenumerate(times)])


def _operations(n: int) -> pd.DataFrame:
    return pd.DataFrame({"id": range(n), "key": [f"op{i}" for i in range(n)], "count": 1})


def test_holm_adjusts_as_the_step_down_procedure_does():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept non-decreasing: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005, np.nan]).tolist()[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert np.isnan(holm([0.01, np.nan])[1]) and holm([0.01, np.nan])[0] == pytest.approx(0.01)


def test_a_machine_that_moves_between_rounds_cancels_and_a_real_slowdown_is_found():
    rng = np.random.default_rng(1)
    machine = rng.lognormal(0.0, 0.3, 20)  # each round's speed: up to 2x apart, shared by A and B
    base = np.array([[1.0], [2.0], [4.0]])
    a = base * machine * rng.lognormal(0.0, 0.01, (3, 20))
    b = base * machine * rng.lognormal(0.0, 0.01, (3, 20)) * np.array([[1.10], [1.0], [1.0]])
    changes = interleaved_changes(_rounds(a), _rounds(b), _operations(3)).set_index("operation")
    assert changes.loc[["op0", "op1", "op2"], "verdict"].tolist() == ["slower", "same", "same"]
    assert changes.at["op0", "low"] > 1.05 and changes.at["op0", "ratio"] == pytest.approx(1.10, rel=0.02)
    assert changes.at["total", "ratio"] == pytest.approx((1.1 + 2 + 4) / 7, rel=0.02)


def test_holm_keeps_the_false_alarms_of_many_unchanged_operations_at_alpha():
    rng = np.random.default_rng(2)
    settings = ChangeSettings(threshold=0.0, resamples=200)  # every interval off 1 would be a change
    alarms = {"corrected": 0, "uncorrected": 0}
    comparisons = 20  # seeded: the same draws every run
    for _ in range(comparisons):
        a, b = rng.lognormal(0.0, 0.05, (23, 12)), rng.lognormal(0.0, 0.05, (23, 12))
        changes = interleaved_changes(_rounds(a), _rounds(b), _operations(23), settings)
        ops = changes[changes["operation"] != "total"]
        alarms["corrected"] += bool(ops["verdict"].isin(["slower", "faster"]).any())
        alarms["uncorrected"] += bool(((ops["low"] > 1.0) | (ops["high"] < 1.0)).any())
    # 23 tests at 5% each raise one in many comparisons (11 of these 20; fewer than 1 - 0.95 ** 23 = 69%, the
    # interval being the wider of the bootstrap and t); corrected, about 5% of comparisons at most
    assert alarms["uncorrected"] >= comparisons / 3
    assert alarms["corrected"] <= 0.05 * comparisons + 2  # 5% of comparisons, with room for chance


def test_a_round_set_aside_on_one_side_stays_paired_and_is_said():
    a, b = np.full((1, 4), 2.0), np.full((1, 4), 2.0)
    rounds_b = _rounds(b)
    rounds_b.loc[1, "kept"] = 0  # round 2 of B waited for cores
    row = interleaved_changes(_rounds(a), rounds_b, _operations(1)).iloc[0]
    assert row["verdict"] == "same" and "B 1 round(s)" in row["why"]
