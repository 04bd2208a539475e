"""The two-lane timeline of a GPU step: the recorded H200 steps replayed with their own durations, the
lanes' breakdown, and the model reducing to the sum of terms on a CPU."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dlbench.analysis.predict import prediction_terms
from dlbench.analysis.step_run import read_step_profile
from dlbench.analysis.timeline import (
    HostOp,
    Launch,
    gpu_step,
    lane_breakdown,
    optimizer_calls,
    replay_ops,
    simulate,
    step_ops,
)
from dlbench.core.values import TimeStats
from dlbench.operators.launch import FRAMEWORK_OUT, read_launch_ms
from dlbench.operators.protocol import output_header, output_row
from dlbench.training.optimizers import FOLDED_COLUMNS, batch_folded_file, folded_rows
from dlbench.training.profile import PROFILE_COLUMNS, batch_ops_file, operator_table, write_csv
from dlbench.training.trace import read_trace

DATA = Path(__file__).resolve().parent.parent / "data"
TRACES = [DATA / "h200_mlp_bs64_trace.json", DATA / "h200_resnet_cifar_bs64_trace.json"]


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_a_recorded_step_replays_within_one_percent(trace):
    replay = replay_ops(read_trace(trace))
    timeline = simulate(replay.ops)
    assert replay.unlaunched == 0 and any(op.sync for op in replay.ops)
    assert timeline.step_us == pytest.approx(replay.traced_step_us, rel=0.01)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_the_traced_step_splits_on_both_lanes(trace):
    lanes = lane_breakdown(read_trace(trace))
    parts = ("device_busy_ms", "device_idle_ms", "host_operators_ms", "host_waiting_ms", "host_outside_ms")
    assert all(lanes[p] >= 0 for p in parts)
    assert lanes["device_busy_ms"] + lanes["device_idle_ms"] == pytest.approx(lanes["step_ms"])
    total = lanes["host_operators_ms"] + lanes["host_waiting_ms"] + lanes["host_outside_ms"]
    assert total == pytest.approx(lanes["step_ms"])


def test_a_kernel_waits_for_its_launch_and_for_its_stream():
    ops = [HostOp("a", 10, (Launch(100),)), HostOp("b", 10, (Launch(5),)), HostOp("c", 10, (Launch(5, stream=1),))]
    timeline = simulate(ops)
    assert timeline.device_end_us == 115 and timeline.host_end_us == 30 and timeline.step_us == 115
    synced = simulate([*ops, HostOp("item", 1, sync=True), HostOp("after", 7)])
    assert synced.host_wait_us == pytest.approx(115 - 31) and synced.step_us == 122


def _frame() -> pd.DataFrame:
    rows = [(0, "forward", "conv", 2, 1.5, "ok"), (1, "loss_forward", "ce", 1, 0.2, "ok"),
            (2, "backward_data", "conv_bwd", 2, 3.0, "ok"), (3, "optimizer", "sgd", 4, 0.1, "ok"),
            (4, "forward", "odd", 1, float("nan"), "unsupported")]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["id", "pass", "name", "occurrences", "benchmark_ms", "status"])
    frame["op_type"] = frame["name"]
    frame["predicted_ms"] = frame["benchmark_ms"] * frame["occurrences"]
    return frame


def test_on_a_cpu_the_timeline_is_the_sum_of_the_prediction_terms():
    frame = _frame()
    terms = prediction_terms(frame)
    extra = [("framework: recording", 0.7)]
    timeline = simulate(step_ops(frame, extra, device="cpu"))
    assert timeline.step_us / 1e3 == pytest.approx(float(terms["ms"].sum()) + 0.7)
    assert timeline.device_busy_us == 0


def test_on_a_gpu_a_launch_bound_step_is_its_host_time(tmp_path):
    frame = _frame()
    out = tmp_path / "torch_x_evaluate_out.csv"
    out.write_text(output_header(launch=True) + "".join(output_row(i, TimeStats(1.0), launch_ms=5.0) for i in range(4)))
    launch = read_launch_ms(tmp_path)
    assert launch == {0: 5.0, 1: 5.0, 2: 5.0, 3: 5.0}  # (an operation launch-bound: 5 ms to issue, 1 ms to run)
    per_tensor = simulate(step_ops(frame, device="cuda", launch_ms=launch))
    assert per_tensor.step_us == pytest.approx(9 * 5000.0 + 100.0)  # the last kernel runs after the last launch
    foreach = simulate(step_ops(frame, device="cuda", launch_ms=launch, default_host_ms=5.0, foreach_calls=2))
    assert foreach.step_us == pytest.approx(7 * 5000.0 + 200.0)


def recorded_profile(trace: Path, folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A recorded step's profile as the instrumented training writes it (its operator table and the folded
    ranges, from the trace's events) and as task=evaluate reads it back: the folded profile."""
    events = read_trace(trace)
    write_csv(folder / batch_ops_file(5), PROFILE_COLUMNS, operator_table(events, 5))
    write_csv(folder / batch_folded_file(5), FOLDED_COLUMNS, folded_rows(events, 5))
    return read_step_profile(folder, "self_device_us")


def test_the_optimizer_is_multi_tensor_when_its_folded_step_ran_foreach_kernels(tmp_path):
    profile, folded = recorded_profile(TRACES[0], tmp_path)  # SGD, momentum: _foreach_mul_ once, _foreach_add_ twice
    assert not profile["name"].str.startswith("aten::_foreach_").any(), "the folded profile has them in one row"
    assert optimizer_calls(folded) == 3
    per_tensor = folded.assign(name=folded["name"].str.replace("_foreach_", "", regex=False))
    assert optimizer_calls(per_tensor) is None


def test_recorded_h200_benchmark_rows_give_a_two_lane_step(tmp_path):
    frame = pd.read_csv(DATA / "h200_mlp_bs64_operations.csv")
    terms = pd.read_csv(DATA / "h200_mlp_bs64_prediction_terms.csv")
    cpu = simulate(step_ops(frame, [(r.term, r.ms) for r in terms.itertuples() if r.term.startswith("framework")]))
    assert cpu.step_us / 1e3 == pytest.approx(float(terms["ms"].sum()))  # the recorded prediction: a plain sum

    _, folded = recorded_profile(TRACES[0], tmp_path)  # the profile ran SGD as three _foreach calls
    timeline = gpu_step(frame, terms, {}, folded, default_host_ms=0.0123)
    device_us = float((frame["benchmark_ms"] * frame["occurrences"]).sum()) * 1e3
    assert timeline.device_busy_us == pytest.approx(device_us)  # every benchmarked kernel runs once
    calls = int(frame.loc[frame["pass"] != "optimizer", "occurrences"].sum()) + 3
    framework_us = float(terms.loc[terms["term"].str.startswith("framework"), "ms"].sum()) * 1e3
    assert timeline.host_busy_us == pytest.approx(calls * 12.3 + framework_us)
    assert timeline.step_us >= max(timeline.host_busy_us, device_us)
    assert timeline.step_us < cpu.step_us  # host and device overlap


def test_on_a_gpu_the_framework_costs_are_the_hosts_issuing_time(tmp_path):
    from dlbench.analysis.timeline import host_framework_ms

    measured = {"dispatch": 0.002, "recording": 0.003, "engine": 0.004}
    assert host_framework_ms(read_launch_ms(tmp_path, FRAMEWORK_OUT), measured) == measured  # no launch column
    rows = [output_row(0, TimeStats(0.1), launch_ms=0.64), output_row(2, TimeStats(0.1), launch_ms=1.28)]
    (tmp_path / FRAMEWORK_OUT).write_text(output_header(launch=True) + "".join(rows))
    host = read_launch_ms(tmp_path, FRAMEWORK_OUT)
    assert host_framework_ms(host, measured) == {"dispatch": 0.01, "recording": 0.003, "engine": 0.02}


def test_on_a_gpu_ddps_exposed_all_reduce_and_copies_lengthen_a_device_bound_step():
    """The all-reduce that outlasts the backward pass holds the main stream before the optimizer; DDP's copies
    are kernels. Host gaps (the framework's terms) hide under a device-bound step, these do not."""
    frame = _frame()  # device-bound: kernels of 0.1-3 ms, issued in 10 us each
    base = prediction_terms(frame)
    framework = pd.DataFrame([{"term": "framework: recording", "ms": 0.5, "operations": 10}])
    ddp = pd.DataFrame([{"term": "DDP gradient copies", "ms": 0.4, "operations": 4},
                        {"term": "exposed communication", "ms": 2.0, "operations": 1}])  # fmt: skip
    launch = dict.fromkeys(range(4), 0.01)
    plain = gpu_step(frame, base, launch, pd.DataFrame(columns=FOLDED_COLUMNS), 0.01)
    with_framework = gpu_step(frame, pd.concat([base, framework]), launch, pd.DataFrame(columns=FOLDED_COLUMNS), 0.01)
    with_ddp = gpu_step(frame, pd.concat([base, ddp]), launch, pd.DataFrame(columns=FOLDED_COLUMNS), 0.01)
    assert with_framework.step_us == pytest.approx(plain.step_us, rel=0.01), "host time hides under the device"
    assert with_ddp.step_us == pytest.approx(plain.step_us + 2400.0, rel=0.01)
    assert with_ddp.device_busy_us == pytest.approx(plain.device_busy_us + 2400.0)
