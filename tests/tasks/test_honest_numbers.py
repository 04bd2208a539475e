"""Numbers that say when they cannot be trusted, end to end through ``python -m dlbench``: an implementation
whose parameters lack ``group`` does not measure a depthwise convolution, statistics an executable did not
report stay missing, a time covering several passes gets their FLOPs, a bad target is a config error, and
a machine kept busy by CPU-burning processes makes a noisy run with unstable operations."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.core.descriptors import CONV, operation_cost

#: A prebuilt operator benchmark obeying the protocol. ``one_mean``: one time per row and nothing else;
#: ``two_reps``: statistics of two repetitions, whatever was asked.
PROGRAM = """\
import sys
REPORT = {report!r}
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
with open(path[:-4] + "_out.csv", "w") as out:
    out.write("id,us\\n" if REPORT == "one_mean" else "id,ms,min,max,reps\\n")
    for row in rows:
        t = 1.0 + sum(float(v) for v in row[1:]) / 1000  # a time derived from the parameters
        out.write(f"{{row[0]}},{{t}}\\n" if REPORT == "one_mean" else f"{{row[0]}},{{t}},{{0.9 * t}},{{1.1 * t}},2\\n")
"""

DWCONV = """\
# @package benchmark
name: dwconv
op_type: Conv
common: {N: 1, C: 32, K: 32, H: 28, W: 28, kernel_shape_0: 3, kernel_shape_1: 3, pads_0: 1, pads_1: 1,
         pads_2: 1, pads_3: 1, strides_0: 1, strides_1: 1, dilations_0: 1, dilations_1: 1, has_bias: 0, mode: 0}
operations:
  - {name: dense, group: 1}
  - {name: depthwise, group: 32}
"""


def register(conf: Path, name: str, report: str, synonyms: str, param_descr: list[str], extra: str = "") -> None:
    (conf / "registry").mkdir(parents=True, exist_ok=True)
    script = conf / f"{name}.py"
    script.write_text(PROGRAM.format(report=report))
    (conf / "registry" / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            synonyms: [{synonyms}]
            exe: [python, {script}]
            param_descr: [{", ".join(param_descr)}]
            backend: custom
            """
        )
        + extra
    )


def dwconv_benchmark(conf: Path) -> None:
    (conf / "benchmark").mkdir(parents=True, exist_ok=True)
    (conf / "benchmark" / "dwconv.yaml").write_text(DWCONV)


def results(store: Store, run_id: str) -> pd.DataFrame:
    return pd.read_csv(StringIO(artifact_text(store, run_id, "results.csv"))).set_index("name")


def test_an_implementation_without_group_does_not_measure_a_depthwise_convolution(tmp_path: Path, store: Store):
    conf = tmp_path / "conf"
    register(conf, "dense_conv", "one_mean", "Conv", [d for d in CONV if d != "group"])
    dwconv_benchmark(conf)
    result = run_dlbench(
        "+benchmark=dwconv", "backend=custom", "threads=64", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED"
    table = results(store, run.info.run_id)
    assert table.loc["dense", "status"] == "ok"
    assert table.loc["depthwise", "status"] == "unsupported"
    assert "has no group" in table.loc["depthwise", "error"] and "group=32" in table.loc["depthwise", "error"]
    assert run.data.metrics["operations_unsupported"] == 1 and run.data.metrics["operations_ok"] == 1
    # the program was never given the depthwise problem
    given = artifact_text(store, run.info.run_id, "protocol/dense_conv_dwconv.csv").splitlines()
    assert [line.split(",")[0] for line in given] == ["0"]
    assert "cannot be posed by this implementation" in result.stdout and "depthwise" in result.stdout
    # and threads beyond the cores: warned at the start, the run tagged noisy
    assert "threads=64 exceeds the" in result.stdout  # Hydra logs to stdout
    assert run.data.tags["dlbench.noisy"] == "true" and "threads=64" in run.data.tags["dlbench.noisy_reason"]


def test_statistics_an_executable_did_not_report_are_missing(tmp_path: Path, store: Store) -> None:
    conf = tmp_path / "conf"
    register(conf, "mean_only", "one_mean", "Relu", ["N", "C", "H", "W", "mode"])
    register(conf, "two_reps", "two_reps", "Relu", ["N", "C", "H", "W", "mode"])
    result = run_dlbench(
        "+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "measure.min_reps=10", "--config-dir", str(conf),
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {r.data.params["implementation"]: r for r in mlflow_runs(store)}
    mean_only = results(store, runs["mean_only"].info.run_id)
    assert (mean_only["status"] == "ok").all() and (mean_only["median_ms"] > 0).all()
    for column in ("reps", "min_ms", "std_ms", "iqr_ms", "p10_ms", "p90_ms", "ci_low_ms", "converged"):
        assert mean_only[column].isna().all(), f"{column} was invented"
    assert mean_only["stats_note"].str.contains("repetitions not reported").all()
    raw = artifact_text(store, runs["mean_only"].info.run_id, "results.csv").splitlines()
    header, first = raw[0].split(","), raw[1].split(",")
    assert first[header.index("reps")] == "" and first[header.index("iqr_ms")] == ""  # NA in the CSV

    two_reps = results(store, runs["two_reps"].info.run_id)
    assert (two_reps["reps"] == 2).all() and two_reps["std_ms"].isna().all()
    assert (two_reps["min_ms"] < two_reps["median_ms"]).all()
    assert two_reps["stats_note"].str.contains("2 repetitions, 10 asked").all()
    assert not any(k.startswith(("reps", "iqr", "std")) for k in runs["mean_only"].data.metrics)


def test_a_time_covering_a_whole_training_step_gets_the_flops_of_its_three_passes(tmp_path: Path, store: Store):
    conf = tmp_path / "conf"
    register(conf, "conv_step", "one_mean", "Conv", CONV, extra="passes: [forward, backward_data, backward_weights]\n")
    dwconv_benchmark(conf)
    result = run_dlbench(
        "+benchmark=dwconv", "backend=custom", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    assert run.data.params["passes"] == "forward+backward_data+backward_weights"
    table = results(store, run.info.run_id)
    for name, group in (("dense", 1), ("depthwise", 32)):
        row = table.loc[name]
        params = {d: row[f"p.{d}"] for d in CONV}
        forward_flops, _ = operation_cost("Conv", params)
        assert row["flops"] == pytest.approx(3 * forward_flops) and row["p.group"] == group
        assert row["timed_passes"] == "forward+backward_data+backward_weights"
        assert row["gflops_per_s"] == pytest.approx(row["flops"] / (row["median_ms"] * 1e6))


@pytest.mark.parametrize("value", ["0", "-0.01"])
def test_a_target_interval_that_cannot_be_reached_is_a_config_error(tmp_path: Path, value: str) -> None:
    result = run_dlbench("+benchmark=relu", f"measure.target_rel_ci={value}", cwd=tmp_path)
    assert result.returncode != 0
    assert "measure.target_rel_ci must be in (0, 1]" in result.stderr
    assert not (tmp_path / "mlflow.db").exists()  # refused before anything ran


BURN = "import time\nend = time.monotonic() + 180\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def busy_machine() -> Iterator[int]:
    """One CPU-burning process per core dlbench may use, plus one; each ends by itself within 3 minutes and
    is killed by its id when the test ends."""
    count = min(len(os.sched_getaffinity(0)) + 1, 33)
    burners = [
        subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        time.sleep(0.5)
        yield count
    finally:
        for proc in burners:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.slow
def test_a_busy_machine_makes_a_noisy_run_and_unstable_operations_are_named(
    tmp_path: Path, store: Store, busy_machine: int
) -> None:
    # all physical cores for the kernels while every core is burning: the timings cannot be trusted, and a
    # +-0.1% target cannot be met within 0.3 s of repeating
    result = run_dlbench(
        "+benchmark=relu", "batch_size=1", "threads=0", "measure.warmup=1", "measure.min_reps=5",
        "measure.min_time_s=0", "measure.target_rel_ci=0.001", "measure.max_time_s=0.3", "quiet=true",
        cwd=tmp_path, store=store, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the machine is busy before measuring" in result.stdout  # Hydra logs to stdout
    assert "the machine was busy (tag dlbench.noisy=true)" in result.stdout
    (run,) = mlflow_runs(store)
    assert run.data.tags["dlbench.noisy"] == "true" and "other processes kept" in run.data.tags["dlbench.noisy_reason"]
    metrics = run.data.metrics
    # an operation either did not converge (unstable) or its threads waited for the burning cores in every
    # round and again at the sweep's end (contended): which one depends on the scheduler, both are named
    assert metrics["interference.other_cpu_cores_mean"] > 0.5
    assert metrics["operations_unstable"] + metrics["operations_contended"] >= 1
    table = results(store, run.info.run_id)
    assert set(table["status"]) <= {"ok", "unstable", "contended"}
    unstable = table[table["status"] == "unstable"]
    assert len(unstable) == metrics["operations_unstable"] and (unstable["rel_ci"] > 0.001).all()
    if len(unstable):
        assert "did not converge" in result.stdout
    contended = table[table["status"] == "contended"]
    assert len(contended) == metrics["operations_contended"]
    if len(contended):
        assert "its threads waited for cores other work held" in result.stdout
    assert all(name in result.stdout for name in (*unstable.index, *contended.index))
    assert table["machine_busy"].all() and (table["other_cpu_cores"] > 0).all()
    # the raw samples are kept: every statistic can be recomputed from them
    samples = pd.read_csv(StringIO(artifact_text(store, run.info.run_id, "protocol/torch_relu_relu_samples.csv")))
    by_id = samples.groupby("id")["ms"]
    assert (by_id.count().sort_index().to_numpy() == table.sort_values("id")["reps"].to_numpy()).all()
    assert by_id.median().sort_index().to_numpy() == pytest.approx(table.sort_values("id")["median_ms"].to_numpy())
