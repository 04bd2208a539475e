"""Time statistics that say what they do not know: missing statistics stay missing, the median's 95% interval
comes from order statistics, convergence is judged against the target, and a measurement's status says
whether it can be trusted."""

from __future__ import annotations

import math
import random

import pytest

from dlbench.core.values import STAT_COLUMNS, Measurement, TimeStats, median_ci_ranks


def test_one_number_is_a_median_and_nothing_else() -> None:
    stats = TimeStats(median_ms=2.5)
    row = stats.as_dict()
    assert row["median_ms"] == 2.5
    assert all(row[c] is None for c in ("min_ms", "std_ms", "iqr_ms", "reps", "p10_ms", "ci_low_ms", "rel_ci"))
    assert row["converged"] is None and list(row) == STAT_COLUMNS


def test_a_single_sample_has_no_spread_and_cannot_converge() -> None:
    stats = TimeStats.from_samples([3.0], target_rel_ci=0.5)
    assert stats.median_ms == stats.min_ms == stats.max_ms == 3.0 and stats.reps == 1
    assert stats.std_ms is None and stats.iqr_ms is None and stats.p10_ms is None
    assert stats.ci_low_ms is None and stats.converged is False


@pytest.mark.parametrize(
    ("n", "ranks"), [(5, None), (6, (0, 5)), (9, (1, 7)), (20, (5, 14)), (100, (39, 60)), (1000, (468, 531))]
)
def test_median_interval_ranks_follow_the_binomial_tables(n: int, ranks: tuple[int, int] | None) -> None:
    assert median_ci_ranks(n) == ranks


def test_the_median_interval_covers_the_true_median_at_least_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    for n in (6, 15, 40, 250):
        covered = 0
        trials = 2000
        for _ in range(trials):
            # exponential samples: true median ln 2, far from symmetric, as timings are
            stats = TimeStats.from_samples([rng.expovariate(1.0) for _ in range(n)])
            covered += stats.ci_low_ms <= math.log(2) <= stats.ci_high_ms
        assert covered / trials >= 0.93, (n, covered / trials)  # 95% nominal, minus sampling error


def test_convergence_is_the_interval_relative_to_the_median() -> None:
    tight = TimeStats.from_samples([10.0 + 0.01 * (i % 5) for i in range(50)], target_rel_ci=0.02)
    assert tight.rel_ci is not None and tight.rel_ci < 0.02 and tight.converged is True
    wide = TimeStats.from_samples([10.0 * (1 + i % 5) for i in range(50)], target_rel_ci=0.02)
    assert wide.rel_ci > 0.02 and wide.converged is False
    assert wide.p10_ms == pytest.approx(10.0) and wide.p90_ms == pytest.approx(50.0)


def test_reported_intervals_are_judged_and_missing_ones_are_not() -> None:
    reported = TimeStats(median_ms=10.0, ci_low_ms=9.0, ci_high_ms=10.5)
    assert reported.judged(0.2).converged is True and reported.judged(0.05).converged is False
    assert TimeStats(median_ms=10.0, reps=50).judged(0.02).converged is None


@pytest.mark.parametrize(
    ("measurement", "status"),
    [
        (Measurement(0, TimeStats(1.0, converged=True)), "ok"),
        (Measurement(0, TimeStats(1.0)), "ok"),  # not judged: nothing says it is unstable
        (Measurement(0, TimeStats(1.0, converged=False)), "unstable"),
        (Measurement(0, None, "unsupported: no group", unsupported=True), "unsupported"),
        (Measurement(0, None, "crashed"), "failed"),
    ],
)
def test_a_measurement_status_says_whether_to_trust_it(measurement: Measurement, status: str) -> None:
    assert measurement.status == status
