"""Rows that say what they compare: with A, A again and B on another backend, each row of ``changes.csv`` names
its pair's runs, what differs between them and the operation's id; two pairs never share a label, and the
forest plot draws them as groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlbench.analysis.comparison.change import ChangeSettings
from dlbench.analysis.comparison.forest import forest_figure, shown_rows
from dlbench.analysis.comparison.sides import Recorded, changes_of_pairs, pair_runs

KEYS = ("conv_a", "conv_b")


def _runs() -> pd.DataFrame:
    rows = [("r-a", "A", "torch"), ("r-again", "A again", "torch"), ("r-b", "B", "onednn")]
    return pd.DataFrame(
        [{"run_id": i, "run_name": n, "status": "FINISHED", "kind": "operator_sweep", "benchmark": "conv",
          "implementation": impl, "backend": impl, "system": "host", "batch_size": 1, "dtype": "float32",
          "device": "cpu", "threads": "1"} for i, n, impl in rows]
    )  # fmt: skip


def _read(run_id: str) -> Recorded:
    rng = np.random.default_rng(len(run_id))
    scale = 1.5 if run_id == "r-b" else 1.0
    samples = pd.DataFrame(
        [{"key": k, "block": f"{run_id}:{r}", "ms": scale * (1 + i) * rng.lognormal(0, 0.01)}
         for i, k in enumerate(KEYS) for r in range(3) for _ in range(10)]
    )  # fmt: skip
    operations = pd.DataFrame({"key": KEYS, "count": 1, "why": "", "id": [7, 9]})
    return Recorded(samples, operations)


def test_two_b_configurations_get_distinct_labels_and_rows_naming_their_runs_and_difference():
    runs = _runs()
    a = runs["run_name"] == "A"
    pairs = pair_runs(runs, a, ~a)
    assert len({p.label for p in pairs}) == 2
    changes = changes_of_pairs(pairs, _read, ChangeSettings(resamples=200))
    by_pair = {p: part.set_index("key") for p, part in changes.groupby("pair")}
    onednn = next(part for label, part in by_pair.items() if "onednn" in label)
    again = next(part for label, part in by_pair.items() if "onednn" not in label)
    assert onednn["differs"].iloc[0] == "implementation torch -> onednn; backend torch -> onednn"
    assert again["differs"].iloc[0] == ""
    assert (onednn["a_runs"] == "r-a").all() and (onednn["b_runs"] == "r-b").all()
    assert (onednn["a_names"] == "A").all() and (onednn["b_names"] == "B").all()
    assert onednn.loc[["conv_a", "conv_b"], "op_id"].tolist() == [7, 9]
    assert onednn.loc["conv_a", "verdict"] == "slower" and again.loc["conv_a", "verdict"] == "same"
    assert changes["operation"].is_unique  # no two rows of the two pairs share a name


def test_the_forest_plot_draws_each_pair_as_a_group_under_its_heading():
    runs = _runs()
    a = runs["run_name"] == "A"
    changes = changes_of_pairs(pair_runs(runs, a, ~a), _read, ChangeSettings(resamples=200))
    rows = shown_rows(changes)
    assert rows["pair"].ne(rows["pair"].shift()).sum() == 2  # each pair's rows together
    assert rows.groupby("pair")["operation"].first().str.endswith("total").all()  # the total heads its group
    fig = forest_figure(changes, 0.05, "test")
    headings = {t.get_text() for t in fig.axes[0].texts}
    assert headings == set(changes["pair"])


def test_a_pair_whose_machine_moved_beyond_the_threshold_says_so_instead_of_slower():
    from dlbench.analysis.comparison.machine import machine_moved, probe_ratios, with_moves

    runs = pd.DataFrame(
        {"run_id": ["a", "b", "lib"], "drift/stream_triad/before_ms": [10.0, 12.0, 10.0],
         "drift/reference_conv_3x3/before_ms": [4.0, 4.6, 3.0]}
    )  # fmt: skip
    busy = probe_ratios(runs, ["a"], ["b"])  # memory 1.2x and compute 1.15x slower: the machine
    assert busy == pytest.approx({"reference_conv_3x3": 1.15, "stream_triad": 1.2})
    why = machine_moved(busy, 0.05)
    assert "moved +15.0%" in why
    # another library on B moves the compute probe alone: not the machine
    assert machine_moved(probe_ratios(runs, ["a"], ["lib"]), 0.05) == ""
    pairs = pair_runs(_runs(), _runs()["run_name"] == "A", _runs()["run_name"] == "B")
    changes = changes_of_pairs(pairs, _read, ChangeSettings(resamples=200))
    moved = with_moves(changes, pairs, [why]).set_index("key")
    assert moved.at["conv_a", "verdict"] == "moved" and moved.at["conv_a", "why"].startswith("the machine moved")
