"""The operator table of recorded CUDA steps (an H200's kineto traces in tests/data): every kernel, memcpy
and memset counted once, for the operator that launched it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.training.profile import UNLAUNCHED, operator_table
from dlbench.training.trace import DEVICE, OPERATOR, RUNTIME, read_trace

DATA = Path(__file__).resolve().parent.parent / "data"
TRACES = [DATA / "h200_mlp_bs64_trace.json", DATA / "h200_resnet_cifar_bs64_trace.json"]
NAME, SELF_CPU, SELF_DEVICE, DEVICE_TOTAL, HOST, KERNELS = 1, 4, 6, 7, 8, 9


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_every_device_activity_is_counted_once_for_its_launching_operator(trace):
    events = read_trace(trace)
    rows = operator_table(events, 5)
    activities = [e for e in events if e.kind == DEVICE]
    operators = {e.name for e in events if e.kind == OPERATOR}
    assert activities and sum(r[KERNELS] for r in rows) == len(activities)
    assert sum(r[SELF_DEVICE] for r in rows) == pytest.approx(sum(e.duration for e in activities) / 1e3, abs=0.01)
    assert not [r for r in rows if r[NAME].startswith(UNLAUNCHED)]
    assert all(r[NAME] in operators for r in rows if r[SELF_DEVICE] > 0)  # no kernel row of its own


def test_cublas_kernels_belong_to_the_innermost_operator():
    rows = operator_table(read_trace(TRACES[0]), 5)
    by_name: dict[str, list[float]] = {}
    for r in rows:
        by_name.setdefault(r[NAME], [0.0, 0.0])
        by_name[r[NAME]][0] += r[SELF_DEVICE]
        by_name[r[NAME]][1] += r[DEVICE_TOTAL]
    assert by_name["aten::linear"][0] == 0 and by_name["aten::linear"][1] > 0
    assert by_name["aten::addmm"][0] == pytest.approx(by_name["aten::linear"][1])


def test_launch_calls_count_in_the_host_time_of_the_operator_that_made_them():
    events = read_trace(TRACES[0])
    rows = operator_table(events, 5)
    assert sum(r[HOST] for r in rows) == pytest.approx(sum(r[SELF_CPU] for r in rows), abs=0.01)
    launches = [r for r in rows if r[NAME] in ("cudaLaunchKernel", "cudaLaunchKernelExC")]
    assert launches and all(r[HOST] == 0 and r[SELF_CPU] > 0 for r in launches)
    relu = [r for r in rows if r[NAME] == "aten::clamp_min"]
    assert all(r[HOST] > r[SELF_CPU] for r in relu)
    assert any(e.kind == RUNTIME for e in events)


def test_a_file_that_is_not_a_trace_is_refused_naming_it(tmp_path):
    bad = tmp_path / "batch_5_trace.json"
    bad.write_text('{"events": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="batch_5_trace.json: no 'traceEvents'"):
        read_trace(bad)


def test_multi_tensor_optimizer_calls_are_matched_to_the_optimizer_operations():
    import pandas as pd

    from dlbench.analysis.match import load_table, match_profile, profile_from_batches
    from dlbench.core.values import Operation
    from dlbench.training.profile import PROFILE_COLUMNS

    rows = pd.DataFrame(operator_table(read_trace(TRACES[0]), 5), columns=PROFILE_COLUMNS)
    profile = profile_from_batches(rows, "self_device_us")
    sgd = [Operation(i, "SGD", (("N", n), ("C", 1), ("H", 1), ("W", 1)), name=f"sgd{i}") for i, n in enumerate((8, 24))]
    result = match_profile(profile, sgd, {0: "optimizer", 1: "optimizer"}, load_table(), {0: 1.0, 1: 3.0})
    foreach = result.rows[result.rows["name"].str.startswith("aten::_foreach_")]
    assert len(foreach) and set(foreach["status"]) == {"matched"}
    device = float(foreach["time_us"].sum())
    assert device > 0 and result.assigned_us[1] == pytest.approx(3 * result.assigned_us[0])
