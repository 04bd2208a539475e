"""task=evaluate end to end: export, extract, unfold, train with profiling, benchmark, match, one run."""

from __future__ import annotations

import hashlib
import math
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, REPO, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark

SMALL_MLP = ("steps=8", "profile.warmup=3", "profile.batches=2", "batch_size=4")


def small_mlp_config(directory: Path) -> Path:
    """A config dir with a narrow MLP (the shipped one is 2048 wide) as training benchmark mlp_small."""
    (directory / "training").mkdir(parents=True, exist_ok=True)
    (directory / "benchmark").mkdir(parents=True, exist_ok=True)
    (directory / "training" / "mlp_small.yaml").write_text(
        f"name: mlp_small\nexe: {REPO / 'TrainingBenchmarks' / 'mlp.py'}\n"
        "parameters: --batch-size ${batch_size} --steps ${steps} --threads ${threads} --hidden 64 --layers 2 --quiet\n"
    )
    (directory / "benchmark" / "mlp_small.yaml").write_text(
        "# @package benchmark\nname: mlp_small\nkind: training\ntraining: mlp_small\n"
    )
    return directory


def table(store: Store, run_id: str, name: str) -> pd.DataFrame:
    return pd.read_csv(StringIO(artifact_text(store, run_id, name)))


# ~16 s on a lightly loaded 2-core machine (five processes import torch), over a minute when it is busy
@pytest.mark.slow
def test_evaluation_of_an_mlp_logs_one_run_with_prediction_tables_and_plots(tmp_path: Path, store: Store):
    conf = small_mlp_config(tmp_path / "conf")
    result = run_dlbench(
        "+benchmark=mlp_small", "task=evaluate", *SMALL_MLP, *FAST, "evaluate.rounds=2", "--config-dir", str(conf),
        cwd=tmp_path, store=store, timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = mlflow_runs(store)
    assert len(runs) == 1, "the evaluation is one run (no child runs from the instrumentation)"
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["dlbench.kind"] == "evaluation"
    assert "system.id" in run.data.tags
    m = run.data.metrics
    assert m["step_time_predicted_ms"] > 0
    assert m["step_time_measured_ms"] > 0
    assert math.isfinite(m["prediction_error_pct"])
    assert 0 <= m["unexplained_time_pct"] <= 100
    assert m["step_time_profiled_ms"] > 0
    changes = []
    for reference in ("reference_gemm_512", "reference_conv_3x3"):  # the machine's speed, before and after
        before, after = m[f"drift/{reference}/before_ms"], m[f"drift/{reference}/after_ms"]
        assert before > 0 and after > 0
        changes.append((after / before - 1) * 100)
    # the drift is what the references agree on: never beyond the largest of their own changes
    assert abs(m["machine_drift_pct"]) <= max(abs(c) for c in changes) + 0.1
    assert ("dlbench.drifted" in run.data.tags) == (abs(m["machine_drift_pct"]) > 10)
    # evaluate.caches (default step): what the benchmarks ran with is logged as the measurement setting, and
    # each operation's footprint in the step with the copies its benchmark really rotated over
    assert run.data.params["evaluate.caches"] == "step" and run.data.params["measure.caches"] == "step"
    operations = table(store, run.info.run_id, "operations.csv")
    timed = operations[operations["benchmark_ms"].notna()]
    assert (timed["footprint_bytes"] >= 0).all() and (timed["rotation_copies"] >= 1).all()
    row_bytes = timed["rotated_bytes"] / timed["rotation_copies"]
    assert (timed["rotated_bytes"] <= timed["cache_cap_bytes"] + row_bytes).all()
    assert m["step_working_set_bytes"] >= timed["footprint_bytes"].max()
    notes = artifact_text(store, run.info.run_id, "notes.txt")
    assert "cache state from the step: working set" in notes
    # where the cap's cache size came from; an assumed one (no sysfs caches, no GPU L2) is said in the notes
    assert set(timed["cache_cap_source"]) <= {"sysfs", "gpu", "fallback"}
    assert ("could not be read" in notes) == (timed["cache_cap_source"] == "fallback").any()
    # evaluate.rounds=2: trained, benchmarked, trained again, benchmarked again; the measured step pools both
    # trainings' steady steps, each round is logged, and the error's interval over the paired rounds holds it
    assert run.data.params["evaluate.rounds"] == "2" and m["evaluation_rounds"] == 2
    steady = [
        steps[(steps["profiled"] == 0) & (steps["step"] >= 3)]["wall_s"] * 1e3
        for steps in (table(store, run.info.run_id, f"profile/{d}batches.csv") for d in ("", "round2/"))
    ]
    assert m["step_time_measured_ms"] == pytest.approx(pd.concat(steady).median(), rel=5e-4)
    rounds = table(store, run.info.run_id, "rounds.csv")
    assert list(rounds["round"]) == [1, 2]
    assert list(rounds["measured_ms"]) == pytest.approx([s.median() for s in steady], rel=1e-9)
    history = _history(store, run.info.run_id, "step_time_measured_round_ms")
    assert [h.step for h in history] == [1, 2] and [h.value for h in history] == pytest.approx(
        list(rounds["measured_ms"]), rel=1e-3
    )  # (metrics keep four significant digits)
    assert len(_history(store, run.info.run_id, "step_time_predicted_round_ms")) == 2
    ratios = rounds["predicted_ms"] / rounds["measured_ms"]
    assert m["prediction_error_pct"] == pytest.approx(100 * (math.prod(ratios) ** 0.5 - 1), rel=1e-3, abs=0.01)
    assert m["prediction_error_lo_pct"] <= m["prediction_error_pct"] <= m["prediction_error_hi_pct"]
    assert m["step_time_measured_lo_ms"] <= min(rounds["measured_ms"]) * 1.001
    assert m["step_time_predicted_lo_ms"] <= m["step_time_predicted_hi_ms"]
    assert "95% interval" in result.stdout and "over 2 paired rounds" in result.stdout

    operations = table(store, run.info.run_id, "operations.csv")
    gemm = operations[operations["op_type"] == "Gemm"]
    assert set(gemm["pass"]) == {"forward", "backward_a", "backward_b"}
    assert gemm["status"].isin(("ok", "unstable")).all() and (gemm["benchmark_ms"] > 0).all()
    assert gemm["in_training_ms"].sum() > 0
    # the interference record, as a sweep's run has it: tag, run metrics, and per operation measured here
    assert run.data.tags["dlbench.noisy"] in ("true", "false") and "interference.load_avg_1m_max" in m
    assert operations.loc[operations["status"] == "ok", "machine_busy"].isin((True, False)).all()
    predicted = (operations["benchmark_ms"].fillna(0) * operations["occurrences"]).sum()
    terms = table(store, run.info.run_id, "prediction_terms.csv").set_index("term")["ms"]
    operator_terms = terms[["forward", "backward", "loss", "optimizer"]].sum()
    assert abs(predicted - operator_terms) <= 1e-6 * predicted
    assert abs(terms.sum() - m["step_time_predicted_ms"]) <= 5e-4 * terms.sum()  # metrics keep 4 significant digits
    # the engine's dispatch costs less than the operators it dispatches (a ratio, as load inflates both)
    assert 0 <= terms["framework: engine"] < operator_terms and "framework: recording" in terms
    per_type = table(store, run.info.run_id, "op_types.csv").set_index("op_type")
    assert {"Gemm", "Relu", "SoftmaxCrossEntropyLoss", "SGD"} <= set(per_type.index)
    assert bool(per_type.loc["SGD", "covered"])
    assert bool(per_type.loc["Gemm", "covered"])
    artifacts = {a.path for a in _list(store, run.info.run_id)}
    for expected in ("predicted_vs_measured.png", "time_breakdown.png", "time_breakdown.csv", "unmatched_ops.csv",
                     "profile_matching.csv", "notes.txt", "profile", "protocol"):  # fmt: skip
        assert expected in artifacts, f"{expected} missing from {sorted(artifacts)}"
    # the trained network, stored once by its content beside the store, not copied into the run's artifacts
    stored = (
        Path(store.uri.removeprefix("sqlite:///")).parent / ".dlbench" / "models" / run.data.tags["dlbench.model_file"]
    )
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == run.data.tags["dlbench.model_sha256"]
    assert "model" not in artifacts
    assert "measured" in result.stdout and "predicted" in result.stdout


@pytest.mark.slow
def test_operators_no_benchmark_serves_are_reported_as_uncovered_and_the_run_finishes(tmp_path: Path, store: Store):
    conf = small_mlp_config(tmp_path / "conf")
    write_fake_benchmark(conf, name="my_relu", synonyms=("Relu",), backend="custom")
    result = run_dlbench(
        "+benchmark=mlp_small", "task=evaluate", "backend=custom", *SMALL_MLP, *FAST, "--config-dir", str(conf),
        "evaluate.bracket=false", "evaluate.caches=hot", cwd=tmp_path, store=store, timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = mlflow_runs(store)[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["evaluate.rounds"] == "1", "evaluate.bracket=false trains once: one round"
    assert "prediction_error_lo_pct" not in run.data.metrics, "one round has no interval"
    assert run.data.params["measure.caches"] == "hot"
    uncovered = run.data.tags["dlbench.uncovered_op_types"].split(",")
    assert {"Gemm", "SoftmaxCrossEntropyLoss"} <= set(uncovered) and "Relu" not in uncovered and "SGD" not in uncovered
    assert run.data.metrics["uncovered_time_pct"] > 10
    assert "op types without a benchmark measurement: " in result.stdout
    assert "Gemm" in artifact_text(store, run.info.run_id, "notes.txt")


def test_evaluate_needs_a_training_benchmark(tmp_path: Path, store: Store):
    result = run_dlbench("+benchmark=relu", "task=evaluate", cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "task=evaluate needs a training benchmark" in result.stderr


def _history(store: Store, run_id: str, metric: str) -> list:
    from mlflow.tracking import MlflowClient

    return sorted(MlflowClient(tracking_uri=store.uri).get_metric_history(run_id, metric), key=lambda h: h.step)


def _list(store: Store, run_id: str) -> list:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=store.uri).list_artifacts(run_id)


def test_an_empty_unfold_table_still_gives_the_training_step_its_backward_pass():
    from dlbench.config import DlbenchConfig
    from dlbench.tasks.evaluate import training_unfold_table

    for unfold in (None, {"strategies": {}}):
        table = training_unfold_table(DlbenchConfig(task="evaluate", unfold=unfold))
        assert {r.pass_name for r in table.rules_for("Conv")} == {"backward_data", "backward_weights"}
    custom = training_unfold_table(DlbenchConfig(task="evaluate", unfold={"strategies": {"Relu": [{"pass": "bwd"}]}}))
    assert set(custom.rules) == {"Relu"}
