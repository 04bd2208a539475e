"""The machine's drift: reference operations timed before and after, reported and never used to rescale."""

from __future__ import annotations

import math

from dlbench.analysis.evaluation import status_line
from dlbench.operators.reference import REFERENCE_OPERATIONS, Drift, reference_operations
from dlbench.operators.registry import load_registry


def test_every_reference_operation_has_a_torch_benchmark_taking_its_parameters() -> None:
    registry = load_registry()
    for op in REFERENCE_OPERATIONS:
        (entry,) = registry.serving(op.op_type, backend="torch", device="cpu")
        assert [name for name, _ in op.params] == list(entry.param_descr), op.name


def test_drift_is_the_largest_change_with_its_sign() -> None:
    drift = Drift({"gemm": 2.0, "conv": 4.0}, {"gemm": 2.1, "conv": 2.0})
    assert drift.change_pct == {"gemm": 5.000000000000004, "conv": -50.0}
    assert drift.largest_pct == -50.0
    assert drift.metrics()["machine_drift_pct"] == -50.0
    assert drift.metrics()["drift/conv/after_ms"] == 2.0
    assert "conv -50.0%" in drift.note() and "limit 10%" in drift.note()


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
