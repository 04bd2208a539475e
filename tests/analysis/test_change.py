"""A change with its interval: the bootstrap ratio of medians against scipy's own bootstrap, verdicts on
synthetic samples with known shifts, rounds kept as blocks (an interval that covers the truth where one over
single samples does not), totals from their parts, and unclean inputs never judged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dlbench.analysis.comparison.change import TOTAL, ChangeSettings, compare_samples, verdict, verdict_counts


def samples(key: str, values, rounds: int = 1) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    block = np.repeat(np.arange(rounds), int(np.ceil(len(values) / rounds)))[: len(values)]
    return pd.DataFrame({"key": key, "block": block, "ms": values})


def test_one_round_interval_matches_scipys_percentile_bootstrap_of_the_ratio_of_medians():
    rng = np.random.default_rng(1)
    a = rng.lognormal(0.0, 0.05, 60)
    b = rng.lognormal(np.log(1.04), 0.05, 60)
    ours = compare_samples(samples("x", a), samples("x", b), settings=ChangeSettings(resamples=4000, seed=3))
    reference = stats.bootstrap(
        (a, b), lambda x, y, axis: np.median(y, axis=axis) / np.median(x, axis=axis), vectorized=True,
        paired=False, confidence_level=0.95, n_resamples=4000, method="percentile", random_state=7,
    )  # fmt: skip
    row = ours.iloc[0]
    assert row["ratio"] == pytest.approx(np.median(b) / np.median(a))
    width = reference.confidence_interval.high - reference.confidence_interval.low
    assert abs(row["low"] - reference.confidence_interval.low) < 0.1 * width
    assert abs(row["high"] - reference.confidence_interval.high) < 0.1 * width


@pytest.mark.parametrize(("shift", "expected"), [(1.10, "slower"), (1 / 1.10, "faster"), (1.0, "same")])
def test_known_shifts_get_their_verdict(shift: float, expected: str):
    rng = np.random.default_rng(2)
    a = rng.lognormal(0.0, 0.02, 200)
    b = rng.lognormal(np.log(shift), 0.02, 200)
    changes = compare_samples(samples("x", a, 4), samples("x", b, 4))
    assert changes.set_index("operation").at["x", "verdict"] == expected


def test_a_shift_smaller_than_the_noise_it_sits_in_is_unsure():
    rng = np.random.default_rng(4)
    a = rng.lognormal(0.0, 0.3, 12)
    b = rng.lognormal(np.log(1.05), 0.3, 12)
    assert compare_samples(samples("x", a), samples("x", b)).iloc[0]["verdict"] == "unsure"


def _drifting_pair(rng: np.random.Generator, rounds: int = 4, per_round: int = 15) -> tuple[pd.DataFrame, ...]:
    """Two sweeps of the same operation: each round moves the machine's speed by ~3% (log-normal), within a
    round the samples scatter by 1%; no real change."""
    sides = []
    for _ in range(2):
        speed = rng.lognormal(0.0, 0.03, rounds)
        values = np.concatenate([s * rng.lognormal(0.0, 0.01, per_round) for s in speed])
        sides.append(samples("x", values, rounds))
    return tuple(sides)


def test_rounds_as_blocks_cover_the_truth_where_single_samples_do_not():
    rng = np.random.default_rng(5)
    covered_blocks = covered_single = 0
    trials = 120
    for trial in range(trials):
        a, b = _drifting_pair(rng)
        settings = ChangeSettings(resamples=500, seed=trial)
        blocks = compare_samples(a, b, settings=settings).iloc[0]
        single = compare_samples(a.assign(block=0), b.assign(block=0), settings=settings).iloc[0]
        covered_blocks += blocks["low"] <= 1.0 <= blocks["high"]
        covered_single += single["low"] <= 1.0 <= single["high"]
    # independently of this code: with 3% between rounds and 1% within, 60 samples treated as independent give
    # an interval too narrow for the rounds' spread, covering about half the time (a 95% interval should
    # cover 95%)
    assert covered_blocks / trials >= 0.85
    assert covered_single / trials <= 0.6


def test_total_sums_medians_times_counts_and_its_interval_comes_from_the_parts():
    rng = np.random.default_rng(6)
    a = pd.concat([samples("big", rng.lognormal(np.log(10.0), 0.01, 80), 4),
                   samples("small", rng.lognormal(0.0, 0.01, 80), 4)])  # fmt: skip
    b = pd.concat([samples("big", rng.lognormal(np.log(10.0), 0.01, 80), 4),
                   samples("small", rng.lognormal(np.log(1.5), 0.01, 80), 4)])  # fmt: skip
    operations = pd.DataFrame({"key": ["big", "small"], "count": [1, 4]})
    changes = compare_samples(a, b, operations).set_index("operation")
    assert changes.at["small", "verdict"] == "slower"
    assert changes.at["big", "verdict"] == "same"
    total = changes.loc[TOTAL]
    expected_a = changes.at["big", "A"] + 4 * changes.at["small", "A"]
    expected_b = changes.at["big", "B"] + 4 * changes.at["small", "B"]
    assert total["A"] == pytest.approx(expected_a) and total["B"] == pytest.approx(expected_b)
    assert total["low"] < total["ratio"] < total["high"] and total["verdict"] == "slower"  # (10 + 6) / (10 + 4)


def test_contended_noisy_and_one_sided_inputs_are_unsure_with_the_reason():
    rng = np.random.default_rng(7)
    a = pd.concat([samples("x", rng.lognormal(0, 0.01, 50)), samples("gone", rng.lognormal(0, 0.01, 50))])
    b = samples("x", rng.lognormal(np.log(1.5), 0.01, 50))
    operations = pd.DataFrame({"key": ["x", "gone"], "count": [1, 1], "why_a": ["", ""], "why_b": ["contended", ""]})
    changes = compare_samples(a, b, operations).set_index("operation")
    assert changes.at["x", "verdict"] == "unsure" and "B contended" in changes.at["x", "why"]
    assert changes.at[TOTAL, "verdict"] == "unsure"
    assert "gone: measured in A only" in changes.at[TOTAL, "why"]


def test_verdict_thresholds_and_counts():
    assert verdict(1.03, 1.08, 0.02) == "slower"
    assert verdict(0.90, 0.97, 0.02) == "faster"
    assert verdict(0.99, 1.01, 0.02) == "same"
    assert verdict(1.01, 1.05, 0.02) == "unsure"
    changes = pd.DataFrame({"operation": ["a", "b", TOTAL], "verdict": ["slower", "same", "unsure"]})
    counts = {"faster": 0, "slower": 1, "same": 1, "unsure": 0, "moved": 0, "total_unsure": 1}
    assert verdict_counts(changes) == counts


def test_the_same_seed_gives_the_same_interval():
    rng = np.random.default_rng(8)
    a, b = samples("x", rng.lognormal(0, 0.1, 30), 3), samples("x", rng.lognormal(0, 0.1, 30), 3)
    first, second = compare_samples(a, b), compare_samples(a, b)
    pd.testing.assert_frame_equal(first, second)


def test_samples_split_into_the_rounds_they_came_from_and_set_aside_rounds_hold_none():
    from dlbench.analysis.comparison.sides import blocks_from_rounds

    # as operators/rounds.py writes them: the samples of the kept rounds, in order; round 2 was set aside
    samples = pd.DataFrame({"id": [0] * 5 + [1] * 3, "ms": [1.0, 1.1, 3.0, 3.1, 3.2, 7.0, 7.1, 7.2]})
    rounds = pd.DataFrame({"id": [0, 0, 0, 1, 1], "round": ["1", "2", "3", "1", "again"],
                           "reps": [2, 4, 3, 9, 3], "kept": [1, 0, 1, 0, 1]})  # fmt: skip
    blocks = blocks_from_rounds(samples, rounds, "run")
    assert blocks[blocks["id"] == 0]["block"].tolist() == ["run:1", "run:1", "run:3", "run:3", "run:3"]
    assert blocks[blocks["id"] == 1]["block"].tolist() == ["run:again"] * 3
    # rounds that do not account for the samples: one block, not a guess
    assert set(blocks_from_rounds(samples, rounds.assign(reps=1), "run")["block"]) == {"run:1"}


@pytest.mark.parametrize(
    ("override", "message"),
    [({"threshold": 1.5}, "compare.threshold"), ({"confidence": 0.2}, "compare.confidence"),
     ({"fail_on": "worse"}, "compare.fail_on='worse'"), ({"fail_on": "slower"}, "needs compare.baseline")],
)  # fmt: skip
def test_compare_settings_are_refused_at_compose_time_with_the_key(override: dict, message: str):
    from dlbench.config import CompareConfig

    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        CompareConfig(**override)


def test_the_reference_probe_says_how_much_slower_the_machine_ran_on_b():
    from dlbench.analysis.comparison.sides import probe_ratio

    runs = pd.DataFrame(
        {"run_id": ["a", "b", "c"], "drift/gemm/before_ms": [10.0, 15.0, None],
         "drift/gemm/after_ms": [10.0, 15.0, None], "drift/conv/before_ms": [4.0, 4.0, None]}
    )  # fmt: skip
    # gemm 1.5x, conv 1.0x: their geometric mean over the readings (1.5 * 1.5 * 1.0) ** (1 / 3)
    assert probe_ratio(runs, ["a"], ["b"]) == pytest.approx(1.5 ** (2 / 3))
    assert np.isnan(probe_ratio(runs, ["a"], ["c"]))  # B logged no probe


def test_a_side_with_a_zero_median_is_unsure_with_the_reason_not_a_division_error():
    rng = np.random.default_rng(8)
    a = np.zeros(12)  # a timer that reads 0 for a call shorter than its resolution
    b = rng.lognormal(0.0, 0.02, 12)
    changes = compare_samples(samples("x", a, 3), samples("x", b, 3)).set_index("operation")
    for operation in ("x", TOTAL):
        assert changes.at[operation, "verdict"] == "unsure"
        assert np.isnan(changes.at[operation, "ratio"])
        assert "A's median is 0 ms" in changes.at[operation, "why"]


def test_a_side_timed_in_one_round_says_its_interval_leaves_out_the_drift():
    rng = np.random.default_rng(9)
    one = compare_samples(samples("x", rng.lognormal(0, 0.02, 20), 1), samples("x", rng.lognormal(0, 0.02, 20), 4))
    assert "A timed in one round" in one.iloc[0]["why"]
    four = compare_samples(samples("x", rng.lognormal(0, 0.02, 20), 4), samples("x", rng.lognormal(0, 0.02, 20), 4))
    assert "one round" not in four.iloc[0]["why"]
