"""The fault matrix: benchmark programs that crash, hang, flood or write broken output fail only what they
touch, with errors naming the program, the file and the row; the rest of the invocation goes on."""

from __future__ import annotations

import csv
import io
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, live_processes_with, mlflow_runs, run_dlbench
from mlflow.tracking import MlflowClient

from dlbench.backends.timing import TimingSettings, time_repeated
from dlbench.core.process import run_command
from dlbench.core.values import Operation
from dlbench.operators.protocol import MAX_OUTPUT_BYTES
from dlbench.operators.registry import OperatorBenchmark, load_registry
from dlbench.operators.runner import RunSettings, measure_operations

QUICK = RunSettings(warmup=0, min_reps=1, max_reps=2, min_time_s=0.0, threads=1, timeout_s=60, rounds=1)

#: Each program reads the protocol input, then runs BODY with ``rows`` (lists of fields), ``out`` (the
#: output path) and ``good(f, row)`` (writes a valid row: time = 1 + the row's first parameter, in ms).
PROGRAM = """\
import os, signal, subprocess, sys, time
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
out = path[:-4] + "_out.csv"
def good(f, row):
    f.write(f"{{row[0]}},{{1 + float(row[1])}}\\n")
{body}
"""


def write_program(conf: Path, name: str, body: str, synonyms: str = "Relu", backend: str = "faulty") -> Path:
    """A config directory with ``registry/<name>.yaml`` for a Python program running ``body``."""
    (conf / "registry").mkdir(parents=True, exist_ok=True)
    script = conf / f"{name}.py"
    script.write_text(PROGRAM.format(body=textwrap.indent(textwrap.dedent(body), "")))
    (conf / "registry" / f"{name}.yaml").write_text(
        f"name: {name}\nsynonyms: [{synonyms}]\nexe: [python, {script}]\n"
        f"param_descr: [N, C, H, W, mode]\nbackend: {backend}\ndevice: cpu\n"
    )
    return conf


def relu_ops(n: int = 3) -> list[Operation]:
    return [Operation(i, "Relu", (("N", i + 1), ("C", 2), ("H", 3), ("W", 4), ("mode", 0))) for i in range(n)]


def benchmark_from(tmp_path: Path, body: str, name: str = "flaky") -> OperatorBenchmark:
    conf = write_program(tmp_path / "conf", name, body)
    return load_registry([conf]).operator(name)


def measure(tmp_path: Path, body: str, settings: RunSettings = QUICK, n: int = 3):
    benchmark = benchmark_from(tmp_path, body)
    result, files = measure_operations(benchmark, relu_ops(n), settings, tmp_path / "work")
    return benchmark, result, files


def errors(result) -> dict[int, str]:
    return {i: m.error for i, m in result.measurements.items() if not m.ok}


WRITE_ALL = """
with open(out, "w") as f:
    f.write("id,ms\\n")
    for row in rows:
        good(f, row)
"""


def one_bad_row(bad_line: str) -> str:
    """All rows good except id 1, written as ``bad_line``."""
    return f"""
with open(out, "w") as f:
    f.write("id,ms\\n")
    for row in rows:
        if row[0] == "1":
            f.write({bad_line!r} + "\\n")
        else:
            good(f, row)
"""


# -- one bad row: only that operation fails, with file:line and id; the others are measured --------------


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("1,2,3", r"_out.csv:3: 3 columns, the header has 2: '1,2,3'"),
        ("1,fast", r"_out.csv:3: id 1: a time is not a number: '1,fast'"),
        ("1,nan", r"_out.csv:3: id 1: time 'nan' is not a finite positive number"),
        ("1,inf", r"_out.csv:3: id 1: time 'inf' is not a finite positive number"),
        ("1,-inf", r"_out.csv:3: id 1: time '-inf' is not a finite positive number"),
        ("1,-2.5", r"_out.csv:3: id 1: time '-2.5' is not a finite positive number"),
        ("1,0", r"_out.csv:3: id 1: time '0' is not a finite positive number"),
        ("1", r"_out.csv:3: 1 columns, the header has 2"),
    ],
    ids=["wrong_column_count", "non_numeric", "nan", "inf", "minus_inf", "negative", "zero", "id_only"],
)
def test_a_bad_row_fails_only_its_operation_naming_file_and_line(tmp_path: Path, bad_line: str, message: str) -> None:
    _, result, files = measure(tmp_path, one_bad_row(bad_line))
    assert set(errors(result)) == {1}
    assert str(files.output_csv) in result.measurements[1].error
    assert __import__("re").search(message, result.measurements[1].error), result.measurements[1].error
    assert result.measurements[0].stats.median_ms == pytest.approx(2.0)
    assert result.measurements[2].stats.median_ms == pytest.approx(4.0)
    assert not result.ok


def test_duplicate_id_fails_that_operation_and_names_both_lines(tmp_path: Path) -> None:
    body = (
        WRITE_ALL
        + """
with open(out, "a") as f:
    f.write("1,99\\n")
"""
    )
    _, result, files = measure(tmp_path, body)
    assert set(errors(result)) == {1}
    assert f"{files.output_csv}:5: id 1 appears more than once (first at line 3)" in result.measurements[1].error
    assert not result.ok


def test_id_never_asked_for_fails_the_run_but_keeps_every_measurement(tmp_path: Path) -> None:
    body = (
        WRITE_ALL
        + """
with open(out, "a") as f:
    f.write("99,1\\n")
"""
    )
    benchmark, result, files = measure(tmp_path, body)
    assert errors(result) == {}
    assert f"{files.output_csv}:5: id 99 was never asked for" in result.run_error
    assert not result.ok, "an unexpected row means the program and dlbench disagree: the run fails"


def test_missing_id_fails_that_operation_quoting_what_the_program_said(tmp_path: Path) -> None:
    body = """
with open(out, "w") as f:
    f.write("id,ms\\n")
    for row in rows:
        if row[0] == "1":
            print("id 1: this shape is not supported", file=sys.stderr)
            continue
        good(f, row)
"""
    _, result, files = measure(tmp_path, body)
    assert set(errors(result)) == {1}
    error = result.measurements[1].error
    assert f"no result row for id 1 in {files.output_csv}" in error
    assert "stderr: id 1: this shape is not supported" in error
    assert result.run_error == "", "a per-id skip announced on stderr is the protocol's way, not a run failure"


def test_non_integer_id_is_reported_with_its_line(tmp_path: Path) -> None:
    _, result, files = measure(tmp_path, one_bad_row("one,2"))
    assert f"{files.output_csv}:3: id 'one' is not an integer" in result.run_error
    assert set(errors(result)) == {1} and "no result row for id 1" in result.measurements[1].error


# -- the whole output is unusable: every operation fails, the run error names program and file ---------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("pass", "the benchmark wrote no output file"),
        ("open(out, 'w').close()", "output file is empty"),
        ("open(out, 'w').write('id,ms\\n')", "output has a header but no rows"),
        ("open(out, 'w').write('id,fortnights\\n0,1\\n')", ":1: unknown time unit 'fortnights'"),
        ("open(out, 'wb').write(b'id,ms\\n0,1\\n1,\\xff\\xfe\\n2,3\\n')", ":3: not UTF-8 text (byte 12"),
        ("os.mkdir(out)", "the output is not a regular file"),
    ],
    ids=["no_output_file", "empty", "header_only", "unknown_unit", "not_utf8", "directory"],
)
def test_unusable_output_fails_every_operation_naming_program_and_file(tmp_path: Path, body: str, message: str) -> None:
    benchmark, result, files = measure(tmp_path, body)
    assert set(errors(result)) == {0, 1, 2}
    assert result.run_error.startswith(f"flaky ({sys.executable} {benchmark.command[1]}): {files.output_csv}")
    assert message in result.run_error
    assert f"no result row for id 0 in {files.output_csv}" in result.measurements[0].error


def test_gigantic_output_is_refused_without_reading_it(tmp_path: Path) -> None:
    # A sparse file: huge on paper, written in microseconds.
    body = WRITE_ALL + f"\nwith open(out, 'r+b') as f:\n    f.truncate({MAX_OUTPUT_BYTES + 1})\n"
    _, result, files = measure(tmp_path, body)
    assert f"output is {MAX_OUTPUT_BYTES + 1} bytes, over the {MAX_OUTPUT_BYTES}-byte limit" in result.run_error
    assert str(files.output_csv) in result.run_error and set(errors(result)) == {0, 1, 2}


# -- the program itself fails: rows written before keep their measurements -----------------------------


def test_segfault_after_the_first_row_keeps_it_and_names_the_signal(tmp_path: Path) -> None:
    body = """
with open(out, "w") as f:
    f.write("id,ms\\n")
    good(f, rows[0])
    f.flush()
    os.kill(os.getpid(), signal.SIGSEGV)
"""
    benchmark, result, files = measure(tmp_path, body)
    assert "flaky" in result.run_error and benchmark.command[1] in result.run_error
    assert "was killed by SIGSEGV" in result.run_error
    assert result.measurements[0].ok and set(errors(result)) == {1, 2}


def test_non_zero_exit_fails_the_run_and_keeps_all_rows(tmp_path: Path) -> None:
    body = WRITE_ALL + "\nprint('giving up', file=sys.stderr)\nsys.exit(3)\n"
    _, result, files = measure(tmp_path, body)
    assert "exited with status 3" in result.run_error
    assert errors(result) == {} and not result.ok
    assert "giving up" in files.stderr_txt.read_text()


def test_sigkill_is_reported_as_a_likely_out_of_memory_kill(tmp_path: Path) -> None:
    _, result, _ = measure(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)")
    assert "was killed by SIGKILL, most likely by the out-of-memory killer" in result.run_error


def test_program_that_cannot_start_is_an_error_not_a_crash(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "registry").mkdir(parents=True)
    exe = conf / "no_interpreter_line"
    exe.write_text("this is not a program\n")
    exe.chmod(0o755)
    (conf / "registry" / "broken.yaml").write_text(f"name: broken\nexe: {exe}\nparam_descr: [N, C, H, W, mode]\n")
    benchmark = load_registry([conf]).operator("broken")
    result, files = measure_operations(benchmark, relu_ops(), QUICK, tmp_path / "work")
    assert f"broken ({exe}) could not be started" in result.run_error and "Exec format error" in result.run_error
    assert set(errors(result)) == {0, 1, 2}


def test_hang_past_the_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = f"dlbench-fault-hang-{tmp_path.name}"
    body = f"""
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
with open(out, "w") as f:
    f.write("id,ms\\n")
    good(f, rows[0])
    f.flush()
    time.sleep(600)
"""
    settings = RunSettings(warmup=0, min_reps=1, max_reps=1, min_time_s=0.0, timeout_s=1.5, rounds=1)
    started = time.perf_counter()
    _, result, _ = measure(tmp_path, body, settings)
    assert time.perf_counter() - started < 10
    assert "flaky" in result.run_error and "timed out after 1.5 s and was killed" in result.run_error
    assert result.measurements[0].ok, "the row written before the hang is kept"
    assert live_processes_with(marker) == [], "the grandchild must die with the group"


def test_children_left_behind_by_a_finished_program_are_stopped(tmp_path: Path) -> None:
    marker = f"dlbench-fault-orphan-{tmp_path.name}"
    body = f'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])\n' + WRITE_ALL
    _, result, _ = measure(tmp_path, body)
    assert result.ok, result.run_error
    assert live_processes_with(marker) == []


def test_stderr_flood_keeps_the_tail_and_the_measurements(tmp_path: Path) -> None:
    body = (
        "for _ in range(200_000):\n    sys.stderr.write('x' * 99 + '\\n')\n"
        "sys.stderr.write('LAST LINE\\n')\n" + WRITE_ALL
    )
    _, result, files = measure(tmp_path, body)
    assert result.ok, result.run_error
    kept = files.stderr_txt.read_text()
    assert len(kept) < 300_000 and kept.endswith("LAST LINE\n") and "earlier bytes dropped" in kept


def test_endless_output_flood_is_stopped_before_it_fills_the_disk(tmp_path: Path) -> None:
    code = "import sys\nwhile True: sys.stderr.write('y' * 4095 + '\\n')"
    started = time.perf_counter()
    result = run_command([sys.executable, "-c", code], timeout=60, max_log_bytes=8 * 2**20, poll_interval_s=0.05)
    assert time.perf_counter() - started < 30
    assert result.describe_failure().startswith("wrote ") and "bytes to stderr, over the 8388608-byte limit" in (
        result.describe_failure()
    )


# -- end to end: the MLflow run of a failing program ends FAILED with its stderr; the others go on --------


def test_a_crashing_implementation_fails_its_run_while_the_other_is_kept(tmp_path: Path, store: Store) -> None:
    conf = tmp_path / "conf"
    crash = """
for _ in range(50_000):
    sys.stderr.write('z' * 99 + '\\n')
print("about to crash", file=sys.stderr)
with open(out, "w") as f:
    f.write("id,ms\\n")
    good(f, rows[0])
    f.flush()
    os.kill(os.getpid(), signal.SIGSEGV)
"""
    write_program(conf, "a_crashing_relu", crash, backend="faulty")
    write_program(conf, "b_steady_relu", WRITE_ALL, backend="faulty")
    result = run_dlbench(
        "+benchmark=relu", "backend=faulty", "batch_size=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert result.returncode != 0
    assert "a_crashing_relu" in result.stderr and "was killed by SIGSEGV" in result.stderr
    runs = {r.data.params["implementation"]: r for r in mlflow_runs(store)}
    assert runs["a_crashing_relu"].info.status == "FAILED"
    assert runs["b_steady_relu"].info.status == "FINISHED"
    crashed = runs["a_crashing_relu"].info.run_id
    stderr = artifact_text(store, crashed, "protocol/a_crashing_relu_relu_stderr.txt")
    assert stderr.rstrip().endswith("about to crash") and "earlier bytes dropped" in stderr
    assert len(stderr) < 300_000, "a flood is truncated to its tail"
    assert "SIGSEGV" in artifact_text(store, crashed, "error.txt")
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, crashed, "results.csv"))))
    assert [r["status"] == "ok" for r in rows] == [True] + [False] * 5
    steady = list(csv.DictReader(io.StringIO(artifact_text(store, runs["b_steady_relu"].info.run_id, "results.csv"))))
    assert len(steady) == 6 and all(r["status"] == "ok" for r in steady)
    client = MlflowClient(tracking_uri=store.uri)
    assert "run_error.txt" in {a.path for a in client.list_artifacts(crashed)}


# -- resource limits: a time budget per operation, and a memory guard instead of an OOM kill ------------


def test_time_budget_cuts_repetitions_but_keeps_the_samples() -> None:
    settings = TimingSettings(warmup=1, min_reps=1000, max_reps=1000, min_time_s=0.0, budget_s=0.2)
    started = time.perf_counter()
    timing = time_repeated(lambda: time.sleep(0.02), settings)
    assert time.perf_counter() - started < 1.0
    assert timing.budget_spent and 3 <= timing.stats.reps < 20
    unlimited = time_repeated(lambda: None, TimingSettings(warmup=0, min_reps=50, max_reps=50, min_time_s=0.0))
    assert unlimited.stats.reps == 50 and not unlimited.budget_spent


def test_a_budget_smaller_than_one_call_still_gives_one_sample() -> None:
    settings = TimingSettings(warmup=5, min_reps=10, max_reps=10, min_time_s=0.0, budget_s=0.001)
    timing = time_repeated(lambda: time.sleep(0.01), settings)
    assert timing.stats.reps == 1 and timing.budget_spent


def conv_op(op_id: int, n: int, c: int, hw: int, k: int) -> Operation:
    params = {"N": n, "C": c, "H": hw, "W": hw, "K": k, "kernel_shape_0": 3, "kernel_shape_1": 3}
    params |= {f"pads_{i}": 1 for i in range(4)} | {"strides_0": 1, "strides_1": 1}
    params |= {"dilations_0": 1, "dilations_1": 1, "group": 1, "mode": 0}
    return Operation(op_id, "Conv", tuple(params.items()))


def test_torch_backend_skips_an_operation_too_big_for_memory_and_measures_the_small_one(tmp_path: Path) -> None:
    benchmark = load_registry().operator("torch_conv")
    operations = [conv_op(0, 1, 3, 8, 4), conv_op(1, 4096, 1024, 512, 1024), conv_op(2, 1, 4, 8, 4)]
    settings = RunSettings(warmup=0, min_reps=1, max_reps=1, min_time_s=0.0, threads=1, memory_fraction=0.5)
    result, _ = measure_operations(benchmark, operations, settings, tmp_path)
    assert result.measurements[0].ok and result.measurements[2].ok
    error = result.measurements[1].error
    assert "no result row for id 1" in error
    assert __import__("re").search(r"id 1: needs \d+\.\d GiB, over 50% of the \d+\.\d GiB free; skipped", error), error
    assert result.run_error == ""


def test_torch_backend_stops_repeating_when_the_operation_budget_is_spent(tmp_path: Path) -> None:
    benchmark = load_registry().operator("torch_gemm")
    params = (("M", 256), ("K", 256), ("N", 256), ("transA", 0), ("transB", 0), ("batch", 1))
    operations = [Operation(0, "Gemm", params)]
    settings = RunSettings(warmup=1, min_reps=10**6, max_reps=10**6, min_time_s=0.0, threads=1, op_budget_s=0.3)
    started = time.perf_counter()
    result, files = measure_operations(benchmark, operations, settings, tmp_path)
    assert time.perf_counter() - started < 30
    stats = result.measurements[0].stats
    assert result.ok and stats is not None and 1 <= stats.reps < 10**6
    assert "id 0: time budget of 0.3 s spent after" in files.stderr_txt.read_text()


def test_resource_settings_reach_the_program_environment() -> None:
    env = RunSettings(op_budget_s=2.5, memory_fraction=0.25).environment()
    assert env["DLBENCH_OP_BUDGET_S"] == "2.5" and env["DLBENCH_MEMORY_FRACTION"] == "0.25"
    assert RunSettings().environment()["DLBENCH_OP_BUDGET_S"] == "0.0", "0 means no limit"
