"""The paired interval over rounds: a slowdown common to both sides of a round cancels; the interval covers
the true ratio as often as it claims, against independent draws of a known ratio."""

from __future__ import annotations

import math

import numpy as np

from dlbench.analysis.comparison import paired_ratio


def test_a_slowdown_common_to_both_sides_cancels() -> None:
    machine = np.array([1.0, 1.5, 0.8, 2.0, 1.1])  # each round's speed of the machine, shared by A and B
    result = paired_ratio(10.0 * machine, 11.0 * machine)
    assert math.isclose(result.ratio, 1.1, rel_tol=1e-12)
    assert result.low <= 1.1 <= result.high and result.high - result.low < 1e-9


def test_one_round_gives_the_ratio_and_no_interval() -> None:
    result = paired_ratio([10.0], [12.0])
    assert math.isclose(result.ratio, 1.2) and math.isnan(result.low) and "one round" in result.why


def test_rounds_without_a_time_are_left_out_and_said() -> None:
    result = paired_ratio([10.0, float("nan"), 10.0, 0.0], [11.0, 12.0, 11.0, 5.0])
    assert result.rounds == 2 and "2 of 4 rounds" in result.why


def test_the_interval_covers_the_true_ratio_as_often_as_claimed() -> None:
    rng = np.random.default_rng(7)
    covered, trials = 0, 400
    for trial in range(trials):
        machine = rng.lognormal(0.0, 0.3, size=4)  # a machine that moves a lot between rounds
        a = 10.0 * machine * rng.lognormal(0.0, 0.05, size=4)
        b = 12.0 * machine * rng.lognormal(0.0, 0.05, size=4)
        result = paired_ratio(a, b, resamples=500, seed=trial)
        covered += result.low <= 1.2 <= result.high
    assert covered / trials >= 0.93  # 95% claimed; the t interval makes up for four rounds' narrow bootstrap
