"""The roofline's kernels: each dtype's GEMM sized by a probe, every kernel bounded in time, and the dtypes the
hardware cannot compute in named as emulated."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.backends.timing import TimingSettings
from dlbench.backends.torch.peaks import NATIVE_CPU_FLAGS, ceilings, measure_gemm_peak, probe_gemm_size


def cpu_flags() -> set[str]:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return flags


def test_the_probe_picks_a_size_in_steps_of_64_within_the_limit() -> None:
    size = probe_gemm_size("float32", "cpu", call_s=0.02, max_size=4096)
    assert 64 <= size <= 4096 and size % 64 == 0
    assert probe_gemm_size("float32", "cpu", call_s=10.0, max_size=128) == 128
    assert probe_gemm_size("float32", "cpu", call_s=0.02, max_size=32) == 32


def test_the_cpu_measures_float32_in_ieee_only_and_each_dtype_as_its_own_ceiling() -> None:
    assert ceilings(["float32", "float16", "bfloat16"], "cpu") == [
        ("float32", "float32", "ieee"), ("float16", "float16", ""), ("bfloat16", "bfloat16", "")
    ]  # fmt: skip


def test_a_kernel_stops_repeating_when_its_budget_is_spent() -> None:
    # only the budget can end it: 10^7 reps of a 128 GEMM (4 MFLOP) take 10 s even at 4 TFLOP/s
    settings = TimingSettings(warmup=1, min_reps=1, max_reps=10_000_000, min_time_s=3600.0, budget_s=0.3)
    peak = measure_gemm_peak(128, "float32", "cpu", settings)
    assert peak.budget_spent and peak.reps >= 1 and peak.best_gflops >= peak.median_gflops > 0


@pytest.mark.slow
def test_the_roofline_names_the_emulated_dtypes_and_the_probed_sizes(tmp_path: Path, store: Store) -> None:
    quick = ("roofline.call_s=0.02", "roofline.min_time_s=0.05", "roofline.stream_mib=8")
    result = run_dlbench("+benchmark=roofline", *quick, "roofline.dtypes=[float32,bfloat16]", cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = mlflow_runs(store)
    table = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "roofline.csv"))))
    sizes = {row["kernel"]: int(row["size"]) for row in table}
    assert sizes["gemm_float32"] % 64 == 0 and sizes["gemm_float32"] < 4096
    native = bool(cpu_flags() & set(NATIVE_CPU_FLAGS["bfloat16"]))
    emulated = {row["kernel"]: row["emulated"] for row in table}
    assert emulated["gemm_float32"] == "False"
    assert emulated["gemm_bfloat16"] == str(not native)
    if not native:
        assert run.data.tags["dlbench.emulated_dtypes"] == "bfloat16"
        assert "bfloat16: emulated (this CPU has none of avx512_bf16" in result.stdout
    else:
        assert "dlbench.emulated_dtypes" not in run.data.tags
