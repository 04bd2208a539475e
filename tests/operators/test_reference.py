"""The machine's drift: reference operations timed before and after, reported and never used to rescale."""

from __future__ import annotations

import math

from dlbench.analysis.evaluation import status_line
from dlbench.operators.reference import (
    REFERENCE_OPERATIONS,
    Drift,
    consensus_pct,
    probe_settings,
    reference_operations,
)
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings


def test_every_reference_operation_has_a_torch_benchmark_taking_its_parameters() -> None:
    registry = load_registry()
    for op in REFERENCE_OPERATIONS:
        (entry,) = registry.serving(op.op_type, backend="torch", device="cpu")
        assert [name for name, _ in op.params] == list(entry.param_descr), op.name


def test_drift_is_the_change_both_references_agree_on_with_its_sign() -> None:
    drift = Drift({"gemm": 2.0, "conv": 4.0}, {"gemm": 1.6, "conv": 2.0})  # both faster: by 20% at least
    assert math.isclose(drift.change_pct["gemm"], -20.0) and drift.change_pct["conv"] == -50.0
    assert math.isclose(drift.largest_pct, -20.0)
    assert math.isclose(drift.metrics()["machine_drift_pct"], -20.0)
    assert drift.metrics()["drift/conv/after_ms"] == 2.0
    assert "conv -50.0%" in drift.note() and "limit 10%" in drift.note()


def test_references_moving_opposite_ways_are_noise_and_raise_no_drift() -> None:
    drift = Drift({"gemm": 2.0, "conv": 4.0}, {"gemm": 2.5, "conv": 1.6})  # +25% and -60%: no machine does that
    assert drift.largest_pct == 0.0 and drift.note() == ""
    assert consensus_pct([3.0, 12.0]) == 3.0 and math.isnan(consensus_pct([]))


def test_the_probe_times_hot_caches_whatever_the_benchmarks_use() -> None:
    assert probe_settings(RunSettings(caches="step")).caches == "hot"
    assert probe_settings(RunSettings(caches="cold", threads=1)) == RunSettings(caches="hot", threads=1)


def test_a_steady_machine_gets_no_note_and_a_missing_reference_no_number() -> None:
    assert Drift({"gemm": 2.0}, {"gemm": 2.1}).note() == ""
    missing = Drift({"gemm": 2.0}, {})
    assert math.isnan(missing.largest_pct) and missing.note() == ""


def test_the_status_line_names_a_drift_over_the_limit_only() -> None:
    metrics = {"step_time_predicted_ms": 90.0, "step_time_measured_ms": 100.0, "prediction_error_pct": -10.0}
    assert "machine" not in status_line({**metrics, "machine_drift_pct": 4.0})
    assert "changed +25% between training and benchmarks" in status_line({**metrics, "machine_drift_pct": 25.0})


def test_the_gpu_references_take_the_torch_benchmarks_parameters_and_are_not_launch_bound() -> None:
    registry = load_registry()
    for cpu, gpu in zip(REFERENCE_OPERATIONS, reference_operations("cuda"), strict=True):
        (entry,) = registry.serving(gpu.op_type, backend="torch", device="cpu")
        assert [name for name, _ in gpu.params] == list(entry.param_descr), gpu.name
        assert gpu.flops >= 100 * cpu.flops  # milliseconds on a large GPU, where a launch is microseconds
    assert reference_operations("cpu") == REFERENCE_OPERATIONS


def _cache(root, cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> None:
    folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
    folder.mkdir(parents=True)
    for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (folder / name).write_text(text + "\n")


def test_the_memory_probe_sizes_its_arrays_from_every_last_level_cache_counted_once(tmp_path) -> None:
    from dlbench.operators.reference import last_level_caches, triad_elements

    # two sockets of two CPUs: each socket's 16 MiB L3 is listed by both of its CPUs; L2s per CPU
    for cpu in range(4):
        _cache(tmp_path, cpu, 0, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "1024K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "16384K", "0-1" if cpu < 2 else "2-3")
    found, where = last_level_caches(tmp_path)
    assert found == 2 * 16 * 2**20 and "2 L3" in where
    assert triad_elements(found) * 8 >= 2 * found  # each array larger than all the caches together
    fallback, why = last_level_caches(tmp_path / "none")
    assert fallback > 0 and "assumed" in why


def test_the_triad_computes_a_equals_b_plus_s_times_c_over_every_chunk() -> None:
    import numpy as np

    from dlbench.operators.reference import TRIAD_CHUNK, triad

    n = 2 * TRIAD_CHUNK + 17  # a last chunk shorter than the others
    b, c = np.arange(n, dtype=float), np.linspace(0.0, 1.0, n)
    a = np.zeros(n)
    triad(a, b, c, 3.0)
    np.testing.assert_array_equal(a, b + 3.0 * c)
