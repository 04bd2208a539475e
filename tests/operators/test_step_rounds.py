"""An evaluation's benchmark rounds: each round gets its share of the repetitions, the rounds combine into one
measurement per operation from every round's samples, and a round that failed an operation costs only that
round."""

from __future__ import annotations

import statistics

import pytest

from dlbench.core.values import Measurement, TimeStats
from dlbench.operators.runner import RunSettings
from dlbench.operators.step_rounds import (
    combine_step_rounds,
    round_medians,
    step_launch_ms,
    step_round_settings,
    step_round_stem,
)


def test_each_round_gets_its_share_of_the_repetitions_and_of_the_interleaved_rounds() -> None:
    settings = RunSettings(min_reps=10, max_reps=100, min_time_s=0.3, max_time_s=3.0, rounds=4)
    share = step_round_settings(settings, 3, 0)
    assert (share.min_reps, share.max_reps, share.rounds) == (4, 34, 1)
    assert share.min_time_s == pytest.approx(0.1) and share.max_time_s == pytest.approx(1.0)
    assert share.warmup == settings.warmup, "every round warms up in full"
    assert step_round_settings(settings, 1, 0) == settings
    assert step_round_stem("torch", 1, 0) == "torch_evaluate" and step_round_stem("torch", 3, 1) == "torch_evaluate_r2"


def measured(op_id: int, samples: list[float]) -> Measurement:
    return Measurement(op_id, TimeStats.from_samples(samples, 0.05), cpu_efficiency=0.99)


def test_rounds_combine_from_every_rounds_samples_and_keep_each_rounds_median() -> None:
    rounds = [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2, 2.3], [1.5, 1.4]]
    per_round = [{7: measured(7, s)} for s in rounds]
    combined = combine_step_rounds(per_round, [{7: s} for s in rounds], RunSettings(min_reps=3))
    assert combined[7].ok and combined[7].stats.median_ms == pytest.approx(statistics.median(sum(rounds, [])))
    assert combined[7].stats.reps == 9
    assert [m[7] for m in round_medians(per_round)] == pytest.approx([statistics.median(s) for s in rounds])


def test_an_operation_failed_in_one_round_keeps_the_others_and_one_failed_in_all_keeps_its_failure() -> None:
    failed = Measurement(3, None, "no result row for id 3")
    per_round = [{3: measured(3, [1.0, 1.2]), 4: failed}, {3: failed, 4: failed}]
    combined = combine_step_rounds(per_round, [{3: [1.0, 1.2]}, {}], RunSettings(min_reps=2))
    assert combined[3].ok and combined[3].stats.median_ms == pytest.approx(1.1)
    assert "failed in round 2: no result row" in combined[3].stats.note
    assert not combined[4].ok and combined[4].error == "no result row for id 3"
    assert round_medians(per_round)[1] == {}


def test_a_gpu_steps_issuing_time_is_the_median_over_the_rounds_that_wrote_one(tmp_path) -> None:
    from dlbench.operators.protocol import output_header, output_row

    stats = TimeStats.from_samples([1.0, 1.1])
    for index, launch in enumerate((0.010, 0.030, 0.020)):  # the combined files of three benchmark rounds
        name = step_round_stem("torch", 3, index)
        rows = output_row(5, stats, launch_ms=launch) + output_row(6, stats, launch_ms=None if index else 0.5)
        (tmp_path / f"{name}_out.csv").write_text(output_header(launch=True) + rows)
    (tmp_path / f"{step_round_stem('torch', 3, 0)}_round1_out.csv").write_text(
        output_header(launch=True) + output_row(5, stats, launch_ms=9.0)
    )  # an inner round's own file: already in its round's combined file
    launch = step_launch_ms(tmp_path, 3)
    assert launch == {5: pytest.approx(0.020), 6: pytest.approx(0.5)}
