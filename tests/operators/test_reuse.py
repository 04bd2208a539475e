"""The reuse store: results found again only under the same key, a damaged file set aside and rebuilt,
parallel writers that do not corrupt it."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from dlbench.core.values import Measurement, Operation, SweepResult, TimeStats
from dlbench.operators.reuse import ReuseKey, ReuseStore, costs

SETTINGS = {"warmup": 1, "min_reps": 2, "max_reps": 100, "min_time_s": 0.0, "op_budget_s": 0.0}


def key(**changes) -> ReuseKey:
    fields = dict(system_id="host|cpu|no-gpu", implementation="torch_relu", command="python -m x Relu | N C H W",
                  device="cpu", dtype="float32", threads=1, settings=SETTINGS, version="0.1.0")  # fmt: skip
    fields.update(changes)
    return ReuseKey(**fields)


def relu(op_id: int, width: int) -> Operation:
    return Operation(id=op_id, op_type="Relu", params=(("N", 1), ("C", 1), ("H", 8), ("W", width), ("mode", 0)))


def result(operations: list[Operation], seconds: float = 2.0) -> SweepResult:
    return SweepResult(
        {op.id: Measurement(op.id, TimeStats.from_samples([0.1 * (op.id + 1), 0.2 * (op.id + 1)]))
         for op in operations},
        extra={"seconds": seconds},
    )  # fmt: skip


def test_results_are_found_again_only_under_the_same_key(tmp_path: Path):
    store = ReuseStore(tmp_path / "reuse.db")
    ops = [relu(0, 16), relu(1, 32)]
    sweep = result(ops)
    assert store.record(key(), ops, sweep, costs(ops, sweep, warmup=1), "run-a") == 2
    # the same problems under other ids (another model) are found; the statistics come back whole
    again = [relu(7, 32), relu(8, 64)]
    found = ReuseStore(tmp_path / "reuse.db").lookup(key(), again)
    assert set(found) == {7} and found[7].stats == sweep.measurements[1].stats and found[7].run_id == "run-a"
    for other in (key(threads=2), key(dtype="float16"), key(version="0.2.0"), key(system_id="elsewhere"),
                  key(settings={**SETTINGS, "min_reps": 5}), key(command="python other.py")):  # fmt: skip
        assert store.lookup(other, again) == {}


def test_the_sweep_time_is_shared_out_by_timed_calls():
    ops = [relu(0, 16), relu(1, 32)]
    shares = costs(ops, result(ops, seconds=3.0), warmup=1)
    # mean 0.15 ms and 0.3 ms, 3 calls each: one third and two thirds of the 3 s
    assert shares[0] == pytest.approx(1.0) and shares[1] == pytest.approx(2.0)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_store_is_named_set_aside_and_rebuilt(tmp_path: Path, damage: str, caplog):
    path = tmp_path / "reuse.db"
    ops = [relu(i, 8 * (i + 1)) for i in range(50)]
    ReuseStore(path).record(key(), ops, result(ops), {}, "run-a")
    data = path.read_bytes()
    path.write_bytes(b"not a database at all\n" * 200 if damage == "garbage" else data[: len(data) // 2])
    store = ReuseStore(path)
    assert store.lookup(key(), ops) == {}
    assert store.warnings and str(path) in store.warnings[0] and "rebuilding" in store.warnings[0]
    assert str(path) in caplog.text
    assert list(tmp_path.glob("reuse.db.corrupt-*"))  # kept for inspection
    assert store.record(key(), ops[:1], result(ops[:1]), {}, "run-b") == 1
    assert set(ReuseStore(path).lookup(key(), ops)) == {0}


def _writer(path: str, worker: int) -> None:
    store = ReuseStore(Path(path))
    for batch in range(10):
        ops = [relu(i, 1000 * worker + 10 * batch + i) for i in range(10)]
        store.record(key(), ops, result(ops), {}, f"worker-{worker}")


def test_parallel_writers_do_not_corrupt_the_store(tmp_path: Path):
    path = tmp_path / "reuse.db"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(str(path), w)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert connection.execute("SELECT COUNT(*) FROM timings").fetchone() == (4 * 10 * 10,)


def test_statistics_the_executable_did_not_report_come_back_missing(tmp_path: Path):
    store = ReuseStore(tmp_path / "reuse.db")
    op = relu(0, 16)
    stats = TimeStats(median_ms=2.5, ci_low_ms=2.4, ci_high_ms=2.6, converged=True, note="repetitions not reported")
    store.record(key(), [op], SweepResult({0: Measurement(0, stats)}), {0: 0.1}, "run-1")
    found = store.lookup(key(), [op])
    assert found[0].stats == stats, "NA statistics stay NA and the interval, verdict and note survive"
