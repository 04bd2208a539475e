"""The CUDA path takes the same rules, offline: an H200's recorded float32 MLP step (tests/data) with its dtypes
rewritten as bfloat16 autocast runs it (the GEMMs, the ReLUs between them and their gradients in bfloat16, the
loss and the optimizer in float32) has every operation benchmarked in the dtype the trace says; an operation no
call matched takes CUDA autocast's rule."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dlbench.analysis.match import load_table
from dlbench.analysis.ran_as import operations_as_ran
from dlbench.analysis.step_run import read_step_profile
from dlbench.core.values import Operation
from dlbench.training.optimizers import FOLDED_COLUMNS, batch_folded_file, folded_rows
from dlbench.training.profile import PROFILE_COLUMNS, batch_ops_file, operator_table, write_csv
from dlbench.training.trace import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
#: the calls bfloat16 autocast runs in bfloat16 in this MLP (its linear layers, and what their outputs reach)
LOWERED = {"aten::linear", "aten::addmm", "aten::mm", "aten::relu", "aten::clamp_min", "aten::threshold_backward",
           "aten::sum"}  # fmt: skip


def rewritten_profile(tmp_path: Path) -> pd.DataFrame:
    trace = json.loads((DATA / "h200_mlp_bs64_trace.json").read_text())
    for event in trace["traceEvents"]:
        args = event.get("args") or {}
        if event.get("cat") == "cpu_op" and event.get("name") in LOWERED and "Input type" in args:
            args["Input type"] = ["c10::BFloat16" if t == "float" else t for t in args["Input type"]]
    path = tmp_path / "batch_5_trace.json"
    path.write_text(json.dumps(trace))
    events = read_trace(path)
    folder = tmp_path / "profile"
    write_csv(folder / batch_ops_file(5), PROFILE_COLUMNS, operator_table(events, 5))
    write_csv(folder / batch_folded_file(5), FOLDED_COLUMNS, folded_rows(events, 5))
    return read_step_profile(folder, "self_device_us")[0]


def recorded_step() -> tuple[list[Operation], dict[int, str]]:
    frame = pd.read_csv(DATA / "h200_mlp_bs64_operations.csv")
    operations, passes = [], {}
    for row in frame.to_dict("records"):
        params = tuple((k, float(v)) for k, v in (p.split("=") for p in str(row["params"]).split(";")))
        operations.append(Operation(int(row["id"]), str(row["op_type"]), params, count=int(row["occurrences"])))
        passes[int(row["id"])] = str(row["pass"])
    return operations, passes


def test_a_bfloat16_cuda_step_is_benchmarked_in_the_dtypes_its_trace_records(tmp_path: Path):
    operations, passes = recorded_step()
    # two operations the trace has no call of: autocast's rule on CUDA decides them
    conv = Operation(100, "Conv", (("N", 64.0), ("C", 3.0), ("H", 8.0), ("W", 8.0), ("K", 4.0)))
    norm = Operation(101, "LayerNormalization", (("N", 1.0), ("C", 1.0), ("H", 64.0), ("W", 2048.0)))
    ran = operations_as_ran([*operations, conv, norm], {**passes, 100: "forward", 101: "forward"},
                            rewritten_profile(tmp_path), load_table(), amp="bf16", device="cuda")  # fmt: skip
    dtype = {op.id: op.dtype for op in ran.operations}
    by_type: dict[str, set[str]] = {}
    for op in ran.operations:
        by_type.setdefault(op.op_type, set()).add(dtype[op.id])
    assert by_type["Gemm"] == {"bfloat16"} and by_type["Relu"] == {"bfloat16"}
    assert by_type["SoftmaxCrossEntropyLoss"] == {""} and by_type["SGD"] == {""}  # float32, the sweep's own
    sources = dict(zip(ran.table["id"], ran.table["source"], strict=True))
    assert (dtype[100], sources[100]) == ("bfloat16", "autocast")
    assert (dtype[101], sources[101]) == ("", "autocast")  # CUDA autocast runs layer norm in float32
    assert ran.notes == ()  # no GPU here to ask whether it computes in bfloat16: nothing said
