"""task=evaluate names the operations far from their benchmark and checks their causes: a clean script has no
outliers; planted causes (tests/training/planted_causes.py) are each found and reproduced by re-timing; subnormal
statistics are recorded, and a subnormal cause is claimed only on a CPU a micro-benchmark shows paying for them."""

from __future__ import annotations

import json
import statistics
import time
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, REPO, Store, artifact_text, mlflow_runs, run_dlbench

SCRIPT = REPO / "tests" / "training" / "planted_causes.py"
SMALL = ("steps=12", "profile.warmup=3", "profile.batches=3", "batch_size=512", "threads=1", "evaluate.bracket=false")


def planted_config(directory: Path, name: str, causes: str) -> Path:
    (directory / "training").mkdir(parents=True, exist_ok=True)
    (directory / "benchmark").mkdir(parents=True, exist_ok=True)
    (directory / "training" / f"{name}.yaml").write_text(
        f"name: {name}\nexe: {SCRIPT}\n"
        f"parameters: --cause {causes} --steps ${{steps}} --batch-size ${{batch_size}} --threads ${{threads}}\n"
    )
    (directory / "benchmark" / f"{name}.yaml").write_text(
        f"# @package benchmark\nname: {name}\nkind: training\ntraining: {name}\n"
    )
    return directory


def evaluate(tmp_path: Path, store: Store, name: str, causes: str, *overrides: str):
    conf = planted_config(tmp_path / "conf", name, causes)
    result = run_dlbench(f"+benchmark={name}", "task=evaluate", *SMALL, *FAST, *overrides, "--config-dir", str(conf),
                         cwd=tmp_path, store=store, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = mlflow_runs(store)[0]
    tables = {
        name: pd.read_csv(StringIO(artifact_text(store, run.info.run_id, name)))
        for name in ("outliers.csv", "outlier_causes.csv", "ran_as.csv")
    }
    return result, run, tables


def subnormal_penalty() -> float:
    """How much slower this CPU multiplies matrices holding 30% subnormals (medians, interleaved)."""
    import torch

    torch.set_num_threads(1)
    plain, w = torch.randn(512, 256), torch.randn(256, 1024)
    subnormal = plain.clone()
    subnormal[torch.rand(plain.shape) < 0.3] = 1e-40
    times: dict[str, list[float]] = {"plain": [], "subnormal": []}
    for _ in range(9):
        for name, x in (("plain", plain), ("subnormal", subnormal)):
            start = time.perf_counter()
            x @ w
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["subnormal"]) / statistics.median(times["plain"])


# each evaluation trains, benchmarks and re-times: about a minute on a lightly loaded 2-core machine, several
# when it is busy
@pytest.mark.slow
def test_a_clean_step_has_no_outliers(tmp_path: Path, store: Store):
    result, run, tables = evaluate(tmp_path, store, "planted_none", "none")
    assert "no outliers" in result.stdout, result.stdout[-3000:]
    assert run.data.metrics["outliers"] == 0 and tables["outliers.csv"].empty
    assert run.data.metrics["predicted_step_ms"] == run.data.metrics["step_time_predicted_ms"]
    assert "predicted_step_with_causes_ms" not in run.data.metrics
    assert "no outliers" in run.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_a_transposed_view_is_named_reproduced_and_fixed_and_a_float64_leak_is_benchmarked_as_it_ran(
    tmp_path: Path, store: Store
):
    # a band of 1.5x: at the default 2x, the transposed Mul (about 5x in a step) left the band in some profiled
    # batches only, once in three runs on a 2-core machine
    band = "evaluate.outliers.high=1.5"
    result, run, tables = evaluate(tmp_path, store, "planted_mixed", "subnormal,transposed,float64", band)
    outliers, causes, ran_as = tables["outliers.csv"], tables["outlier_causes.csv"], tables["ran_as.csv"]
    reproduced = causes[causes["reproduced"]]
    # the transposed gain is read by the Mul's forward and both its backward passes: each found is diagnosed
    mul_ids = set(outliers[outliers["op_type"] == "Mul"]["id"])
    assert mul_ids, outliers.to_string()
    found = reproduced[reproduced["id"].isin(mul_ids)]
    assert set(found["id"]) == mul_ids and set(found["cause"]) == {"strides"}, causes.to_string()
    # the GELU that computed in float64 is benchmarked in float64, as the profile recorded it (issue 48): its
    # benchmark is what ran, so it is no outlier, and no dtype cause is claimed for a call in its own dtype
    gelus = ran_as[ran_as["op_type"] == "Gelu"]
    assert set(gelus["dtype"]) == {"float64"}, ran_as.to_string()
    assert not set(outliers[outliers["op_type"] == "Gelu"]["id"]) and "dtype" not in set(reproduced["cause"])
    assert (reproduced["with_cause_ms"] > reproduced["plain_ms"]).all()
    m = run.data.metrics
    assert m["predicted_step_with_causes_ms"] > m["predicted_step_ms"]
    assert "fix:" in result.stdout and "cause:" in run.data.tags["mlflow.note.content"]
    assert m["tensor_stats_batch_ms"] > 0
    # the subnormal inputs: recorded at the fraction planted (30% of the batch), a cause only where this CPU pays
    stats = [json.loads(line) for line in artifact_text(store, run.info.run_id, "profile/tensor_stats.jsonl")
             .splitlines()]  # fmt: skip
    first = next(c for c in stats[1:] if c["name"] == "aten::addmm" and [512, 256] in c["shapes"])
    inputs = [a["tensor"] for a in first["args"] if isinstance(a, dict) and "tensor" in a]
    assert any(abs(t.get("subnormal", 0) - 0.3) < 0.01 for t in inputs), inputs
    claimed = "subnormal" in set(reproduced["cause"])
    if subnormal_penalty() < 1.25:
        assert not claimed, "this CPU computes on subnormals at full speed: no subnormal cause may be claimed"


@pytest.mark.slow
def test_a_worker_oversubscribing_the_cores_is_recorded_and_every_outlier_checked_for_it(tmp_path: Path, store: Store):
    # On 2 cores the worker's threads slow the step by 1.5x to 3x as the scheduler pleases, so whether an
    # operation leaves the band, and whether its re-timing beside competitors reproduces it, changes from run to
    # run (the re-timing itself: tests/backends/test_retime.py). What the step recorded does not change.
    result, run, tables = evaluate(tmp_path, store, "planted_threads", "threads", "evaluate.outliers.high=1.3")
    lines = artifact_text(store, run.info.run_id, "profile/tensor_stats.jsonl").splitlines()
    machine = json.loads(lines[0])["machine"]
    assert machine["children_runnable_threads"] >= 1 and machine["children_busy_cores"] > 0.5, machine
    causes = tables["outlier_causes.csv"]
    threads = causes[causes["cause"] == "threads"]
    assert set(threads["id"]) == set(causes["id"]), causes.to_string()  # every outlier is checked for it
    assert all("runnable thread(s) of the script's child processes" in d for d in threads["detail"])
