"""Each operation's dtype and memory format reach the executable: per row where it takes them (the embedded
torch kernels), else in one invocation per dtype and memory format told by DLBENCH_* variables; a row in a
dtype or memory format an implementation does not run is ``unsupported`` with "unable: <what>"."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dlbench.core.settings import row_code
from dlbench.core.values import Operation
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.protocol import read_input
from dlbench.operators.registry import OperatorBenchmark, load_registry
from dlbench.operators.runner import RunSettings, measure_operations

QUICK = RunSettings(warmup=0, min_reps=2, min_time_s=0.0, max_time_s=0.05, threads=1, rounds=1, contended_below=0)


def relu(op_id: int, dtype: str = "", memory_format: str = "", n: int = 2) -> Operation:
    params = (("N", n), ("C", 4), ("H", 5), ("W", 5), ("mode", 0))
    return Operation(op_id, "Relu", params, dtype=dtype, memory_format=memory_format)


MIX = [relu(0), relu(1, "bfloat16"), relu(2, "float16", "channels_last"), relu(3, "", "channels_last")]


def test_one_torch_sweep_runs_each_row_in_its_own_dtype_and_memory_format(tmp_path: Path) -> None:
    entry = load_registry().operator("torch_relu")
    result, files = measure_operations(entry, MIX, QUICK, tmp_path)
    assert [m.status for m in result.measurements.values()] == ["ok"] * 4, result.run_error
    sent = {op_id: values[-2:] for op_id, values in read_input(files.input_csv)}
    bf16, fp16, fp32 = (row_code("dtype", d) for d in ("bfloat16", "float16", "float32"))
    assert sent == {0: [fp32, 0], 1: [bf16, 0], 2: [fp16, 1], 3: [fp32, 1]}


#: a protocol program that logs, per invocation, the ids it got and the dtype and memory format it was told
TELLING = """\
import json, os, sys
path = sys.argv[-1]
ids = [int(line.split(",")[0]) for line in open(path) if line.strip()]
told = {{k: os.environ.get(k) for k in ("DLBENCH_DTYPE", "DLBENCH_MEMORY_FORMAT")}}
with open({log!r}, "a") as log:
    log.write(json.dumps({{"ids": ids, **told}}) + "\\n")
with open(path[:-4] + "_out.csv", "w") as out:
    out.write("id,ms\\n" + "".join(f"{{i}},1.5\\n" for i in ids))
"""


def telling_program(tmp_path: Path, extra: str) -> tuple[OperatorBenchmark, Path]:
    log, script, conf = tmp_path / "told.log", tmp_path / "told.py", tmp_path / "conf"
    script.write_text(TELLING.format(log=str(log)))
    (conf / "registry").mkdir(parents=True)
    (conf / "registry" / "told.yaml").write_text(
        f"name: told\nsynonyms: [Relu]\nexe: [python, {script}]\nparam_descr: [N, C, H, W, mode]\n"
        f"backend: test\ndevice: cpu\n{textwrap.dedent(extra)}"
    )
    return load_registry([conf]).operator("told"), log


def test_an_executable_without_row_settings_gets_one_invocation_per_dtype_and_memory_format(tmp_path: Path) -> None:
    entry, log = telling_program(tmp_path, "memory_formats: [contiguous, channels_last]\n")
    result, files = measure_operations(entry, [*MIX, relu(4, "bfloat16", n=3)], QUICK, tmp_path / "work")
    assert all(m.ok for m in result.measurements.values()), result.run_error
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    told = {(c["DLBENCH_DTYPE"], c["DLBENCH_MEMORY_FORMAT"]): c["ids"] for c in calls}
    assert told == {
        ("float32", None): [0],
        ("bfloat16", None): [1, 4],
        ("float16", "channels_last"): [2],
        ("float32", "channels_last"): [3],
    }
    assert len(calls) == 4
    written = files.output_csv.read_text().splitlines()  # the groups' outputs, merged: one header
    assert written[0] == "id,ms" and sorted(int(line.split(",")[0]) for line in written[1:]) == [0, 1, 2, 3, 4]
    assert sorted(op_id for op_id, _ in read_input(files.input_csv)) == [0, 1, 2, 3, 4]


def test_rows_in_a_dtype_or_layout_an_entry_does_not_run_are_unsupported_and_never_sent(tmp_path: Path) -> None:
    entry, log = telling_program(tmp_path, "dtypes: [float32]\n")
    result, _ = measure_operations(entry, MIX, QUICK, tmp_path / "work")
    statuses = {i: (m.status, m.error) for i, m in result.measurements.items()}
    assert statuses[0] == ("ok", "")
    assert statuses[1] == ("unsupported", "unsupported: unable: bfloat16 (told runs float32)")
    assert statuses[2] == ("unsupported", "unsupported: unable: float16 (told runs float32)")
    assert statuses[3] == ("unsupported", "unsupported: unable: channels_last (told runs contiguous)")
    assert result.ok, "an unsupported row fails nothing"
    assert [json.loads(line)["ids"] for line in log.read_text().splitlines()] == [[0]]


def test_the_native_onednn_kernel_is_never_asked_for_bfloat16(tmp_path: Path) -> None:
    entry = load_registry().operator("onednn_relu")
    if not entry.available:
        pytest.skip(entry.unavailable_reason)
    result, _ = measure_operations(entry, [relu(0), relu(1, "bfloat16")], QUICK, tmp_path)
    assert result.measurements[0].ok, result.run_error
    assert result.measurements[1].status == "unsupported"
    assert result.measurements[1].error.startswith("unsupported: unable: bfloat16")


def test_a_sweep_of_rows_none_of_which_an_entry_runs_says_so_and_runs_nothing(tmp_path: Path) -> None:
    entry, log = telling_program(tmp_path, "dtypes: [float32]\n")
    result, _ = measure_with_progress(entry, [relu(0, "bfloat16"), relu(1, "", "channels_last")], QUICK,
                                      tmp_path / "work", "told", quiet=True)  # fmt: skip
    assert {m.status for m in result.measurements.values()} == {"unsupported"}
    assert result.run_error == (
        "told runs float32 in contiguous, none of these operations as they ran (unable: bfloat16; unable: "
        "channels_last): choose a backend that does, e.g. backend=torch"
    )
    assert not log.exists()
