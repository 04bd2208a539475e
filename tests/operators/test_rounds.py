"""Interleaved rounds and the contention check, with real programs of the executable protocol and the embedded
torch kernels: each round runs every operation in a new order with a share of the repetitions, the statistics
come from the kept rounds' samples, and an operation whose threads wait instead of working is contended."""

from __future__ import annotations

import csv
import json
import math
import random
import textwrap
from pathlib import Path

import pytest

from dlbench.core.contention import available
from dlbench.core.values import Measurement, Operation, TimeStats
from dlbench.operators.reference import reference_benchmarks
from dlbench.operators.registry import OperatorBenchmark, load_registry
from dlbench.operators.rounds import RoundResult, combine_rounds, measured_again, probe_report, round_orders
from dlbench.operators.runner import RunSettings, measure_operations

#: A protocol program: reads its rows, logs what it was told (order, DLBENCH_* shares) to LOG, writes its
#: header at once, then BODY per row with ``op_id`` and ``value`` (the row's first parameter).
PROGRAM = """\
import json, os, sys, time
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
told = {{k: os.environ.get(k) for k in ("DLBENCH_MIN_REPS", "DLBENCH_MIN_TIME_S", "DLBENCH_WARMUP")}}
with open({log!r}, "a") as log:
    log.write(json.dumps({{"order": [int(r[0]) for r in rows], **told}}) + "\\n")
out = open(path[:-4] + "_out.csv", "w")
samples = open(path[:-4] + "_samples.csv", "w")
out.write("id,ms\\n"); out.flush()
samples.write("id,ms\\n")
for row in rows:
    op_id, value = int(row[0]), float(row[1])
{body}
    out.flush()
    samples.flush()
{after}
"""


def program(tmp_path: Path, name: str, body: str, after: str = "") -> tuple[OperatorBenchmark, Path]:
    log = tmp_path / f"{name}.log"
    script = tmp_path / f"{name}.py"
    script.write_text(PROGRAM.format(log=str(log), body=textwrap.indent(textwrap.dedent(body), "    "), after=after))
    conf = tmp_path / f"{name}_conf"
    (conf / "registry").mkdir(parents=True)
    (conf / "registry" / f"{name}.yaml").write_text(
        f"name: {name}\nsynonyms: [Relu]\nexe: [python, {script}]\n"
        "param_descr: [N, C, H, W, mode]\nbackend: test\ndevice: cpu\n"
    )
    return load_registry([conf]).operator(name), log


def relu_ops(n: int) -> list[Operation]:
    return [Operation(i, "Relu", (("N", i + 1), ("C", 2), ("H", 3), ("W", 4), ("mode", 0))) for i in range(n)]


#: writes min_reps samples of (1 + N) ms per row, and the row
STEADY = """
reps = int(os.environ["DLBENCH_MIN_REPS"])
samples.write("".join(f"{op_id},{1 + value}\\n" for _ in range(reps)))
out.write(f"{op_id},{1 + value}\\n")
"""


def test_each_round_runs_every_operation_in_a_new_order_with_a_share_of_the_repetitions(tmp_path: Path) -> None:
    entry, log = program(tmp_path, "steady", STEADY)
    # contended_below=0: on a loaded machine a row could be judged contended and measured once more
    settings = RunSettings(
        warmup=3, min_reps=10, min_time_s=0.2, max_time_s=1.0, threads=1, rounds=4, contended_below=0
    )
    result, files = measure_operations(entry, relu_ops(6), settings, tmp_path / "work")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 4
    assert all(sorted(c["order"]) == list(range(6)) for c in calls)
    assert len({tuple(c["order"]) for c in calls}) > 1, "every round is shuffled anew"
    assert [c["DLBENCH_MIN_REPS"] for c in calls] == ["3"] * 4  # ceil(10 / 4)
    assert [float(c["DLBENCH_MIN_TIME_S"]) for c in calls] == [0.05] * 4
    assert [c["DLBENCH_WARMUP"] for c in calls] == ["3"] * 4, "every round builds anew and warms up anew"
    for op_id, m in result.measurements.items():
        assert m.status == "ok" and m.stats is not None
        assert m.stats.reps == 12 and m.stats.median_ms == 2 + op_id  # statistics over every round's samples
    assert result.extra["rounds"] == 4
    with files.rounds_csv.open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    assert len(rows) == 24 and {r["round"] for r in rows} == {"1", "2", "3", "4"}
    combined = [line for line in files.samples_csv.read_text().splitlines()[1:]]
    assert len(combined) == 6 * 12, "the samples the table was computed from"


def test_round_orders_shuffle_every_round_and_one_round_keeps_the_order() -> None:
    rng = random.Random(3)
    items = list(range(9))
    orders = round_orders(items, 5, rng)
    assert len(orders) == 5 and all(sorted(order) == items for order in orders)
    assert len({tuple(order) for order in orders}) == 5
    assert round_orders(items, 1, rng) == [items]


def test_around_round_is_called_right_before_and_after_each_round(tmp_path: Path) -> None:
    entry, log = program(tmp_path, "steady", STEADY)
    seen: list[tuple[int, str, int]] = []  # (round, stage, rounds the program had logged by then)

    def around(index: int, stage: str) -> None:
        seen.append((index, stage, len(log.read_text().splitlines()) if log.exists() else 0))

    settings = RunSettings(warmup=0, min_reps=2, min_time_s=0.0, threads=1, rounds=3, contended_below=0)
    measure_operations(entry, relu_ops(3), settings, tmp_path / "work", around_round=around)
    assert seen == [(0, "before", 0), (0, "after", 1), (1, "before", 1), (1, "after", 2), (2, "before", 2),
                    (2, "after", 3)]  # fmt: skip


def test_a_single_round_runs_the_rows_in_their_order_with_the_whole_share(tmp_path: Path) -> None:
    entry, log = program(tmp_path, "steady", STEADY)
    settings = RunSettings(min_reps=10, threads=1, rounds=1, contended_below=0)
    result, files = measure_operations(entry, relu_ops(4), settings, tmp_path / "work")
    (call,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert call["order"] == [0, 1, 2, 3] and call["DLBENCH_MIN_REPS"] == "10"
    assert all(m.stats is not None and m.stats.reps == 10 for m in result.measurements.values())
    assert files.rounds_csv is None


@pytest.mark.skipif(not available(), reason="reads CPU time from Linux /proc")
def test_a_program_whose_threads_sleep_instead_of_working_is_contended_and_measured_again(tmp_path: Path) -> None:
    # holds the wall time with next to no CPU time: what a descheduled sibling makes of a parallel kernel
    sleepy = STEADY.replace('out.write(f"{op_id}', 'time.sleep(0.15)\nout.write(f"{op_id}')
    entry, log = program(tmp_path, "sleepy", sleepy, after="time.sleep(0.2)")
    settings = RunSettings(warmup=0, min_reps=2, threads=2, rounds=1)
    result, files = measure_operations(entry, relu_ops(3), settings, tmp_path / "work")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [sorted(c["order"]) for c in calls] == [[0, 1, 2], [0, 1, 2]], "once more at the end, all of them"
    for m in result.measurements.values():
        assert m.status == "contended" and m.cpu_efficiency is not None and m.cpu_efficiency < 0.2
        assert m.stats is not None and "still contended" in m.stats.note
    assert result.ok, "contended is a flag on a measurement, not a failure"


def test_a_round_whose_threads_waited_is_set_aside_and_the_others_kept() -> None:
    def round_of(index: int, ms: float, efficiency: float) -> RoundResult:
        return RoundResult(index, 0, TimeStats(ms, reps=3), (ms, ms, ms), efficiency)

    rounds = [round_of(0, 1.0, 0.97), round_of(1, 30.0, 0.41), round_of(2, 1.2, 0.99)]
    m = combine_rounds(7, rounds, 3, target_rel_ci=0.02, asked_reps=6, limit=0.85)
    assert m.status != "contended" and m.stats is not None
    assert m.stats.reps == 6 and m.stats.median_ms == pytest.approx(1.1)
    assert "1 of 3 rounds set aside" in m.stats.note and m.cpu_efficiency == pytest.approx(0.98)
    every = combine_rounds(7, [round_of(0, 30.0, 0.4), round_of(1, 31.0, 0.5)], 2, 0.02, 6, limit=0.85)
    assert every.contended and every.status == "contended"
    recovered = measured_again(every, round_of(2, 1.0, 0.95), limit=0.85)
    assert recovered.status in ("ok", "unstable") and recovered.stats.median_ms == 1.0
    unread = measured_again(every, RoundResult(2, 0, TimeStats(1.0), (), None), limit=0.85)
    assert unread.status == "contended", "a re-measurement whose threads cannot be read does not clear it"
    assert not combine_rounds(7, [round_of(0, 30.0, 0.4)], 1, 0.02, 6, limit=0.0).contended, "limit 0: never"


def test_the_probe_says_when_the_machine_moved_more_than_the_operations_spread() -> None:
    spread_2pct = {0: Measurement(0, TimeStats(1.0, ci_low_ms=0.98, ci_high_ms=1.02))}
    moved = probe_report({"reference_conv_3x3": [1.0, 1.1, 1.12, 1.15]}, spread_2pct)
    assert moved["drift_metrics"]["machine_drift_pct"] == pytest.approx(15.0)
    assert moved["drift_metrics"]["operations_spread_pct"] == pytest.approx(2.0)
    assert "moved +15.0% during the sweep" in moved["drift_note"]
    steady = probe_report({"reference_conv_3x3": [1.0, 1.01, 0.995]}, spread_2pct)
    assert "drift_note" not in steady and steady["drift_metrics"]["machine_drift_max_pct"] == pytest.approx(1.0)


def test_the_torch_kernels_report_their_cpu_efficiency_and_the_probe_runs_every_round(tmp_path: Path) -> None:
    registry = load_registry()
    entry = registry.operator("torch_relu")
    ops = [Operation(i, "Relu", (("N", 1), ("C", 8), ("H", 64 * (i + 1)), ("W", 64), ("mode", 0))) for i in range(3)]
    settings = RunSettings(warmup=1, min_reps=4, max_reps=10**6, min_time_s=0.1, max_time_s=0.1, threads=1, rounds=2)
    probe = reference_benchmarks(registry, "cpu")
    result, files = measure_operations(entry, ops, settings, tmp_path / "work", probe=probe)
    for m in result.measurements.values():  # 50 ms of calls per round: long enough to be judged
        assert m.stats is not None and m.cpu_efficiency is not None and 0 < m.cpu_efficiency <= 1.0
    assert math.isfinite(result.extra["drift_metrics"]["machine_drift_pct"])
    # the memory probe beside the compute probe, read at the first round's start and after the last
    assert result.extra["drift_metrics"]["drift/stream_triad/before_ms"] > 0
    assert result.extra["drift_metrics"]["drift/stream_triad/after_ms"] > 0
    probes = sorted(p.name for p in (tmp_path / "work").glob("*_probe1_*_out.csv"))
    assert probes == [f"{files.input_csv.stem}_probe1_{label}_out.csv" for label in ("end", "round1", "round2")]


#: as STEADY, with the launch column a benchmark timed with CUDA events writes: (N + 1) / 100 ms per call
WITH_LAUNCH = """
reps = int(os.environ["DLBENCH_MIN_REPS"])
samples.write("".join(f"{op_id},{1 + value}\\n" for _ in range(reps)))
out.write(f"{op_id},{1 + value},{(1 + value) / 100}\\n")
"""


def test_the_combined_files_of_several_rounds_keep_each_operations_launch_column(tmp_path: Path) -> None:
    from dlbench.operators.protocol import parse_output

    entry, _ = program(tmp_path, "launching", WITH_LAUNCH)
    script = Path(entry.command[-1])  # its header gets the launch column
    script.write_text(script.read_text().replace('out.write("id,ms\\n")', 'out.write("id,ms,launch\\n")'))
    settings = RunSettings(warmup=0, min_reps=4, min_time_s=0.0, threads=1, rounds=4, contended_below=0)
    result, files = measure_operations(entry, relu_ops(3), settings, tmp_path / "work")
    assert all(m.ok for m in result.measurements.values())
    rounds = sorted((tmp_path / "work").glob("*_round*_out.csv"))
    assert len(rounds) == 4 and all(parse_output(p).launch_ms for p in rounds), "each round wrote its launches"
    combined = parse_output(files.output_csv).launch_ms
    assert combined == pytest.approx({0: 0.02, 1: 0.03, 2: 0.04})


def test_a_and_b_interleaved_run_back_to_back_each_round_in_the_order_drawn(tmp_path: Path) -> None:
    from dlbench.operators.runner import Side, measure_interleaved

    shared = tmp_path / "calls.log"
    entries = []
    for name in ("side_a", "side_b"):  # one log for both programs: the order in which the invocations ran
        body = STEADY + f"\nopen({str(shared)!r}, 'a').write({name!r} + '\\n') if row is rows[-1] else None\n"
        entry, _ = program(tmp_path, name, body)
        entries.append(entry)
    settings = RunSettings(warmup=0, min_reps=4, min_time_s=0.0, threads=1, rounds=5, contended_below=0)
    a, b = (Side(e, relu_ops(3), settings, e.name) for e in entries)
    (result_a, files_a), (result_b, files_b), orders = measure_interleaved(a, b, tmp_path / "work", seed=3)
    calls = shared.read_text().split()
    assert len(orders) == 5 and sorted(orders.count(o) for o in ("AB", "BA")) == [2, 3]  # balanced, 5 is odd
    assert calls == [side for order in orders for side in ("side_a", "side_b")[:: 1 if order == "AB" else -1]]
    assert all(m.ok for m in (*result_a.measurements.values(), *result_b.measurements.values()))
    assert files_a.rounds_csv is not None and files_b.rounds_csv is not None and files_b.rounds_csv.exists()


def test_each_side_runs_first_in_half_the_rounds_in_a_random_order() -> None:
    import random

    from dlbench.operators.runner import balanced_orders

    draws = [balanced_orders(20, random.Random(seed)) for seed in range(50)]
    assert all(d.count("AB") == d.count("BA") == 10 for d in draws)  # a coin per round gave 12 of 20 twice
    assert len(set(draws)) == 50  # in a new order each time
    odd = [balanced_orders(7, random.Random(seed)) for seed in range(50)]
    assert {d.count("AB") for d in odd} == {3, 4}
