"""A and B in one run: ``task=compare compare.a... compare.b...`` measures both sides round by round, logs each
as a child run as a sweep is, and judges B / A over the paired rounds; the gate stops a known slowdown; a side
without a benchmark, or sides given twice, are configuration errors."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO, Store, artifact_text, mlflow_runs, run_dlbench

SCALED_CONF = REPO / "tests" / "data" / "compare"


def test_sides_in_one_run_need_a_benchmark_and_exclude_stored_sides(tmp_path: Path, store: Store):
    result = run_dlbench("task=compare", "compare.b.backend=onednn", cwd=tmp_path, store=store)
    assert result.returncode == 2 and "+benchmark=" in result.stderr and "Traceback" not in result.stderr
    both = run_dlbench("task=compare", "compare.b.backend=onednn", "compare.baseline=x", cwd=tmp_path, store=store)
    assert both.returncode == 2 and "give one pair or the other" in both.stderr


@pytest.mark.slow  # one interleaved run of two real (small) sweeps
def test_a_and_b_in_one_run_are_child_runs_and_the_gate_stops_the_slowed_side(tmp_path: Path, store: Store):
    result = run_dlbench(
        "task=compare", "+benchmark=relu_small", f"--config-dir={SCALED_CONF}", "batch_size=2", "threads=1",
        "compare.a.implementation=relu_as_is", "compare.b.implementation=relu_slowed", "compare.rounds=4",
        "compare.fail_on=slower", "measure.warmup=1", "measure.min_reps=8", "measure.min_time_s=0", "quiet=true",
        cwd=tmp_path, store=store,
    )  # fmt: skip
    runs = mlflow_runs(store)
    compare = next(r for r in runs if r.data.tags.get("dlbench.kind") == "compare")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == compare.info.run_id]
    assert sorted(r.data.params["compare.side"] for r in children) == ["A", "B"]
    assert all(r.data.tags["dlbench.kind"] == "operator_sweep" for r in children)
    changes = pd.read_csv(StringIO(artifact_text(store, compare.info.run_id, "changes.csv"))).set_index("key")
    side = {r.data.params["compare.side"]: r.info.run_id for r in children}
    assert (changes["a_runs"] == side["A"]).all() and (changes["b_runs"] == side["B"]).all()
    assert changes["differs"].iloc[0] == "implementation relu_as_is -> relu_slowed; backend as_is -> slowed"
    assert compare.data.params["orders"] and set(compare.data.params["orders"]) <= {"A", "B"}
    # the even ids run their problems 4 times a call: B / A near 4 in every round, busy machine or not
    even = changes.loc[["stem", "l1_256", "l3_1024"]]
    assert (even["ratio"] > 1.5).all(), even
    # the gate fails when the total, or an operation after Holm's correction, is slower; with 4 rounds on a busy
    # machine an operation's corrected p may not reach 0.05, the total's interval usually does
    slower = changes["verdict"] == "slower"
    assert result.returncode == (1 if slower.any() else 0), result.stdout[-3000:] + result.stderr[-2000:]
    odd = changes.loc[["l1_64", "l2_512", "l4_2048"], "verdict"]
    assert not odd.isin(["slower", "faster"]).any()
