"""+benchmark=roofline: measured peaks as a run, looked up by system for operator sweeps."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from helpers import Store, mlflow_runs, run_dlbench

from dlbench.analysis.results import add_roofline_columns
from dlbench.analysis.roofline import attach_roofline, latest_roofline
from dlbench.core.roofline import Roofline, ceiling_key, fp32_math_of
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget

TINY = ("roofline.gemm_size=64", "roofline.stream_mib=1", "roofline.min_time_s=0", "roofline.min_reps=2")


@pytest.mark.slow
def test_roofline_run_logs_peaks_bandwidth_and_hardware_tags(tmp_path: Path, store: Store):
    result = run_dlbench("+benchmark=roofline", *TINY, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-2000:]
    run = mlflow_runs(store)[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["dlbench.kind"] == "roofline"
    assert run.data.tags["system.id"]
    metrics = run.data.metrics
    assert metrics["peak_gflops_float32"] > 0
    assert metrics["bandwidth_gbs"] == max(metrics["bandwidth_copy_gbs"], metrics["bandwidth_triad_gbs"]) > 0
    assert metrics["ridge_point_flop_per_byte"] == pytest.approx(
        metrics["peak_gflops_float32"] / metrics["bandwidth_gbs"], rel=1e-3
    )  # each metric keeps 4 significant digits
    assert "gemm_float32" in result.stdout and "triad" in result.stdout
    assert run.data.params["roofline.gemm_size"] == "64"

    # the latest roofline of this system is found again through the search API
    target = TrackingTarget(store.uri, store.experiment)
    found = latest_roofline(target, run.data.tags["system.id"])
    assert found is not None and found.run_id == run.info.run_id
    assert found.peak("float32") == pytest.approx(metrics["peak_gflops_float32"])
    assert latest_roofline(target, "some|other|system") is None


def test_roofline_sizes_are_validated_at_compose_time(tmp_path: Path):
    result = run_dlbench("+benchmark=roofline", "roofline.dtypes=[float64]", cwd=tmp_path)
    assert result.returncode != 0
    assert "roofline.dtypes" in result.stderr


def test_roofline_columns_bound_each_operation_by_compute_or_bandwidth():
    frame = pd.DataFrame({"flops": [1e9, 1e6, None], "bytes": [1e6, 1e6, 1e3], "gflops_per_s": [50.0, 0.5, None]})
    out = add_roofline_columns(frame, peak_gflops=100.0, bandwidth_gbs=10.0)
    assert out["intensity"].tolist()[:2] == [1000.0, 1.0]
    assert out["roof_gflops"].tolist()[:2] == [100.0, 10.0]
    assert out["roofline_fraction"].tolist()[:2] == [0.5, 0.05]
    assert out["bound"].tolist() == ["compute", "memory", ""]
    assert math.isnan(out["roofline_fraction"].iloc[2])
    roofline = Roofline({"float32": 100.0, "bfloat16": 400.0}, 10.0)
    assert roofline.bound(1.0) == 10.0 and roofline.bound(1e4, "bfloat16") == 400.0
    assert roofline.peak("float16") is None, "no ceiling of another dtype stands in"
    assert math.isnan(roofline.bound(1e4, "float16"))
    assert "no ceiling measured for float16" in roofline.missing("float16")


def test_a_sweep_on_a_system_with_a_roofline_gets_its_columns_and_plot(tmp_path: Path, store: Store):
    from dlbench.tracking.system import hardware_tags

    target = TrackingTarget(store.uri, store.experiment)
    system = hardware_tags()["system.id"]
    with TrackedRun(target, "roofline", tags={"dlbench.kind": "roofline", "system.id": system}) as roof:
        roof.log_metrics({"peak_gflops_float32": 100.0, "bandwidth_gbs": 10.0})
    frame = pd.DataFrame({"flops": [1e9], "bytes": [1e6], "gflops_per_s": [20.0], "op_type": ["Conv"]})
    with TrackedRun(target, "sweep", tags={"dlbench.kind": "operator_sweep"}) as sweep:
        out = attach_roofline(sweep, frame, "float32", "sweep")
    assert out["roofline_fraction"].tolist() == [0.2]
    run = next(r for r in mlflow_runs(store) if r.info.run_id == sweep.run_id)
    assert run.data.tags["dlbench.roofline_run_id"] == roof.run_id
    assert run.data.metrics["roofline_fraction_median"] == pytest.approx(0.2)

    with TrackedRun(TrackingTarget(store.uri, store.experiment + "-empty"), "sweep") as lonely:
        assert attach_roofline(lonely, frame, "float32", "sweep").equals(frame)


@pytest.mark.parametrize(
    ("dtype", "fp32_math", "op_type", "device", "ceiling"),
    [
        ("float32", "framework", "Conv", "cuda", "tf32"),  # PyTorch's default: cuDNN convolutions in TF32
        ("float32", "framework", "MatMul", "cuda", "float32"),  # ... matmuls in IEEE
        ("float32", "ieee", "Conv", "cuda", "float32"),
        ("float32", "tf32", "Gemm", "cuda", "tf32"),
        ("float32", "framework", "Conv", "cpu", "float32"),  # the CPU computes float32 in IEEE
        ("float16", "tf32", "Conv", "cuda", "float16"),  # the math concerns float32 only
        ("bfloat16", "framework", "MatMul", "cuda", "bfloat16"),
    ],
)
def test_each_operation_is_scored_against_the_ceiling_of_its_own_dtype_and_math(
    dtype: str, fp32_math: str, op_type: str, device: str, ceiling: str
) -> None:
    assert ceiling_key(dtype, fp32_math_of(dtype, fp32_math, op_type, device)) == ceiling


def test_a_sweep_gets_no_score_where_its_ceiling_was_not_measured(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    from dlbench.tracking.system import hardware_tags

    target = TrackingTarget(store.uri, store.experiment)
    system = hardware_tags()["system.id"]
    with TrackedRun(target, "roofline", tags={"dlbench.kind": "roofline", "system.id": system}) as roof:
        roof.log_metrics({"peak_gflops_float32": 50.0, "peak_gflops_tf32": 400.0, "bandwidth_gbs": 10.0})
    frame = pd.DataFrame(
        {"flops": [1e12, 1e12], "bytes": [1e6, 1e6], "gflops_per_s": [100.0, 40.0], "op_type": ["Conv", "MatMul"]}
    )
    with TrackedRun(target, "sweep", tags={"dlbench.kind": "operator_sweep"}) as sweep:
        gpu = attach_roofline(sweep, frame, "float32", "sweep", "framework", "cuda")
        ieee = attach_roofline(sweep, frame, "float32", "sweep", "ieee", "cuda")
        half = attach_roofline(sweep, frame, "float16", "sweep", "framework", "cuda")
    # framework math on a GPU: the convolution ran in TF32 (400), the matmul in IEEE (50)
    assert gpu["roof_gflops"].tolist() == [400.0, 50.0] and gpu["roofline_fraction"].tolist() == [0.25, 0.8]
    assert ieee["roof_gflops"].tolist() == [50.0, 50.0]
    assert half.equals(frame), "float16 was not measured: no float32 stand-in, no score"
    assert "no ceiling measured for float16" in caplog.text
