"""Operator benchmarks timed beside copies of themselves (a data-parallel step's other ranks on one CPU), with
a real program of the executable protocol that stamps each row's start and end: every row the measuring
invocation times runs while a copy runs the same rows, the copies start first and are gone when the sweep
returns, and only the measuring invocation's rows are the measurement."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

from dlbench.analysis.data_parallel import ranks_beside
from dlbench.core.process import group_runs
from dlbench.core.values import Operation
from dlbench.operators.registry import OperatorBenchmark, load_registry
from dlbench.operators.runner import RunSettings, measure_operations

#: each row sleeps 40 ms; its start and its end are stamped (pid, input file, id, time) in LOG as they happen
PROGRAM = """\
import json, os, sys, time
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
out = open(path[:-4] + "_out.csv", "w")
out.write("id,ms\\n"); out.flush()
def stamp(**fields):
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"pid": os.getpid(), "input": os.path.basename(path), **fields}}) + "\\n")
for row in rows:
    start = time.time()
    stamp(id=int(row[0]), start=start)
    time.sleep(0.04)
    end = time.time()
    stamp(id=int(row[0]), start=start, end=end)
    out.write(f"{{row[0]}},{{(end - start) * 1e3}}\\n"); out.flush()
"""


def _program(tmp_path: Path) -> tuple[OperatorBenchmark, Path]:
    log = tmp_path / "stamps.jsonl"
    script = tmp_path / "stamped.py"
    script.write_text(textwrap.dedent(PROGRAM.format(log=str(log))))
    conf = tmp_path / "conf"
    (conf / "registry").mkdir(parents=True)
    (conf / "registry" / "stamped.yaml").write_text(
        f"name: stamped\nsynonyms: [Relu]\nexe: [python, {script}]\n"
        "param_descr: [N, C, H, W, mode]\nbackend: test\ndevice: cpu\n"
    )
    return load_registry([conf]).operator("stamped"), log


def _ops(n: int) -> list[Operation]:
    return [Operation(i, "Relu", (("N", i + 1), ("C", 2), ("H", 3), ("W", 4), ("mode", 0))) for i in range(n)]


def _stamps(log: Path) -> list[dict]:
    """Every row a program started, with its end (infinite for a row still running when its program was
    stopped: it ran at least until then)."""
    rows: dict[tuple[int, float], dict] = {}
    for line in log.read_text().splitlines():
        stamp = json.loads(line)
        rows.setdefault((stamp["pid"], stamp["start"]), {**stamp, "end": math.inf}).update(stamp)
    return list(rows.values())


def test_every_timed_row_runs_while_a_copy_runs_the_same_rows_and_no_copy_outlives_the_sweep(tmp_path: Path):
    benchmark, log = _program(tmp_path)
    # rows that sleep do not work: contention is not watched (it would measure them again at the end)
    settings = RunSettings(warmup=0, min_reps=1, rounds=2, beside=1, timeout_s=60, contended_below=0.0)
    result, files = measure_operations(benchmark, _ops(4), settings, tmp_path / "work")

    assert all(m.ok for m in result.measurements.values()), result.measurements
    stamps = _stamps(log)
    measured = [s for s in stamps if "_beside" not in s["input"]]
    copies = [s for s in stamps if "_beside1" in s["input"]]
    assert sorted(s["id"] for s in measured) == [0, 0, 1, 1, 2, 2, 3, 3]  # two rounds, every row once a round
    assert {s["id"] for s in copies} <= {0, 1, 2, 3} and copies
    for row in measured:  # a copy was inside a row of its own all along (40 ms rows, back to back, 50 passes)
        assert any(c["start"] <= row["end"] and c["end"] >= row["start"] for c in copies), row
        assert any(c["start"] < row["start"] for c in copies), "the copy started after the timed row"
    assert not any(group_runs(pid) for pid in {s["pid"] for s in copies})  # each copy leads its process group
    # the measurement is the measuring invocation's: its rows' times, not the copies'
    assert len({s["pid"] for s in measured}) == 2 and not {s["pid"] for s in measured} & {s["pid"] for s in copies}
    assert files.rounds_csv is not None and files.rounds_csv.exists()
    assert not list((tmp_path / "work").glob("*_beside*"))  # the copies' files are load, not measurements


def test_a_copy_that_fails_is_said_and_the_measurement_goes_on(tmp_path: Path, caplog):
    benchmark, log = _program(tmp_path)
    script = Path(benchmark.command[-1])
    script.write_text("import sys\nif '_beside' in sys.argv[-1]: sys.exit('no load today')\n" + script.read_text())
    settings = RunSettings(warmup=0, min_reps=1, rounds=1, beside=1, timeout_s=60, contended_below=0.0)
    with caplog.at_level("WARNING"):
        result, _ = measure_operations(benchmark, _ops(2), settings, tmp_path / "work")
    assert all(m.ok for m in result.measurements.values())
    assert "a copy beside the benchmark stamped_beside1.csv" in caplog.text and "no load today" in caplog.text


def test_alone_no_copy_runs(tmp_path: Path):
    benchmark, log = _program(tmp_path)
    settings = RunSettings(warmup=0, min_reps=1, rounds=1, contended_below=0.0)
    result, _ = measure_operations(benchmark, _ops(2), settings, tmp_path / "w")
    assert all(m.ok for m in result.measurements.values())
    assert all("_beside" not in s["input"] for s in _stamps(log))
    assert not list((tmp_path / "w").glob("*_beside*"))


def test_a_data_parallel_cpu_step_is_benchmarked_beside_its_other_ranks_and_a_gpu_step_alone():
    ddp = {"bucket_cap_mb": 25, "world_size": 4}
    assert ranks_beside(ddp, "cpu") == 3
    assert ranks_beside(ddp, "cuda") == 0  # a GPU per rank: nothing shared that a kernel waits on
    assert ranks_beside({"world_size": 2}, "cpu") == 0  # not a DDP script: one process
    assert ranks_beside({**ddp, "world_size": 1}, "cpu") == 0
