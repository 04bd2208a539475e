"""The collective benchmarks: a real process group of gloo ranks on this machine behind the CSV protocol, the
bandwidths nccl-tests defines, and the time checked against torch.distributed timed directly."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import FAST, REPO, artifact_text, clean_env, job_runs, run_dlbench

from dlbench.backends.collectives.launch import free_port
from dlbench.core.collectives import bandwidths_gbs, bus_factor
from dlbench.operators.protocol import output_path_for, parse_output, samples_path_for, write_input

QUICK = {"DLBENCH_THREADS": "1", "DLBENCH_WARMUP": "1", "DLBENCH_MIN_REPS": "3", "DLBENCH_MIN_TIME_S": "0"}


def run_executable(op_type: str, rows: list, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = write_input(tmp_path / f"{op_type}.csv", rows)
    return subprocess.run(
        [sys.executable, "-m", "dlbench.backends.collectives", op_type, str(path)],
        env=clean_env(**{**QUICK, **env}, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bus_bandwidth_factors_are_those_of_nccl_tests() -> None:
    assert bus_factor("AllReduce", 2) == 1.0
    assert bus_factor("AllReduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("AllGather", 4) == bus_factor("ReduceScatter", 4) == pytest.approx(3 / 4)
    assert bus_factor("Broadcast", 16) == 1.0
    algbw, busbw = bandwidths_gbs("AllReduce", {"bytes": 2e9, "world_size": 4}, median_ms=1000.0)
    assert (algbw, busbw) == (pytest.approx(2.0), pytest.approx(3.0))


@pytest.mark.parametrize(
    "op_type",
    ["AllReduce", *(pytest.param(op, marks=pytest.mark.slow) for op in ("AllGather", "ReduceScatter", "Broadcast"))],
)
def test_each_row_is_timed_among_its_world_size_of_ranks(op_type: str, tmp_path: Path) -> None:
    rows = [(0, [65536, 2]), (1, [1 << 20, 2]), (2, [65536, 1])]
    done = run_executable(op_type, rows, tmp_path)
    assert done.returncode == 0, done.stderr
    out = output_path_for(tmp_path / f"{op_type}.csv")
    parsed = parse_output(out, expected_ids=[0, 1, 2])
    assert set(parsed.rows) == {0, 1, 2} and not parsed.problems
    assert parsed.samples_path == samples_path_for(tmp_path / f"{op_type}.csv")
    assert all(stats.reps and stats.reps >= 3 for stats in parsed.rows.values())
    table = {int(r["id"]): r for r in csv.DictReader(out.open())}
    for op_id, (message, world) in ((i, v) for i, v in rows):
        algbw = message / (float(table[op_id]["ms"]) * 1e6)
        assert float(table[op_id]["algbw_gbs"]) == pytest.approx(algbw, rel=1e-9)
        assert float(table[op_id]["busbw_gbs"]) == pytest.approx(algbw * bus_factor(op_type, world), rel=1e-9)


def test_rows_that_cannot_run_are_reported_and_the_others_measured(tmp_path: Path) -> None:
    rows = [(0, [4096, 2]), (1, [4096, 0]), (2, [4096, 1])]
    done = run_executable("SendRecv", rows, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "id 1: expected bytes, world_size with world_size >= 1" in done.stderr
    assert "id 2: SendRecv cannot run: SendRecv needs world_size >= 2" in done.stderr
    assert set(parse_output(output_path_for(tmp_path / "SendRecv.csv")).rows) == {0}


def test_world_size_below_one_is_a_config_error(tmp_path: Path) -> None:
    done = run_dlbench("+benchmark=allreduce", "world_size=0", cwd=tmp_path)
    assert done.returncode == 2
    assert "world_size must be >= 1" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_allreduce_sweep_reports_bus_bandwidth_for_every_size_in_a_multirun_over_world_size(
    tmp_path: Path, store
) -> None:
    done = run_dlbench(
        "-m", "+benchmark=allreduce", "world_size=1,2", "threads=1", *FAST, cwd=tmp_path, store=store, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = job_runs(store)
    assert sorted(r.data.params["world_size"] for r in runs) == ["1", "2"]
    for run in runs:
        table = list(csv.DictReader(artifact_text(store, run.info.run_id, "results.csv").splitlines()))
        assert [int(r["bytes"].split(".")[0]) for r in table] == [2**k for k in range(12, 29)]
        world = int(run.data.params["world_size"])
        for row in table:
            assert row["status"] in ("ok", "unstable")
            algbw = int(row["p.bytes"]) / (float(row["median_ms"]) * 1e6)
            assert float(row["busbw_gbs"]) == pytest.approx(algbw * bus_factor("AllReduce", world), rel=1e-6)
        # one rank moves nothing over a bus: nccl-tests' factor 2(n-1)/n is 0 there
        assert (run.data.metrics["busbw_gbs_max"] > 0) == (world == 2)
        assert "op/16MiB/busbw_gbs" in run.data.metrics


DIRECT_TIMING = textwrap.dedent(
    """
    import os, statistics, sys, time
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    buffer = torch.zeros(int(sys.argv[1]) // 4)
    for _ in range(3):
        dist.all_reduce(buffer)
    times = []
    for _ in range(int(sys.argv[2])):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(buffer)
        times.append(time.perf_counter() - start)
    mine = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(mine.item() * 1e3)
    dist.destroy_process_group()
    """
)


def direct_allreduce_ms(script: Path, message: int, calls: int) -> float:
    """torch.distributed timed by hand: two gloo ranks, the slowest rank's median of ``calls`` all-reduces."""
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(message), str(calls)],
            env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r), "WORLD_SIZE": "2"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in ranks]
    assert all(p.returncode == 0 for p in ranks)
    return float(outputs[0])


@pytest.mark.slow
def test_reported_allreduce_time_agrees_with_torch_distributed_timed_directly(tmp_path: Path) -> None:
    """16 MiB: a call of several milliseconds, far above timer and barrier noise. Both are measured five times,
    alternately, so a busy spell of the shared machine falls on both. Another program's load only adds time,
    so the least disturbed attempt of each (the smallest median) is compared: within a factor of 1.5 either way (a
    busy spell can fall on one side's best attempt; a wrong byte count or a missing barrier is a factor of 2+)."""
    message, calls = 16 << 20, 15
    script = tmp_path / "direct.py"
    script.write_text(DIRECT_TIMING)
    ours, direct = [], []
    for _attempt in range(5):
        done = run_executable(
            "AllReduce", [(0, [message, 2])], tmp_path, DLBENCH_MIN_REPS=str(calls), DLBENCH_WARMUP="3"
        )
        assert done.returncode == 0, done.stderr
        ours.append(parse_output(output_path_for(tmp_path / "AllReduce.csv")).rows[0].median_ms)
        direct.append(direct_allreduce_ms(script, message, calls))
    assert 1 / 1.5 < min(ours) / min(direct) < 1.5, (ours, direct)


def test_more_nccl_ranks_than_gpus_is_a_configuration_error_before_any_rank_starts(tmp_path: Path) -> None:
    from dlbench.core.device import check_ranks_fit
    from dlbench.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"world_size=2 on device=cuda needs 2 GPUs and this machine shows 1"):
        check_ranks_fit([1, 2], "cuda", gpus=1)
    check_ranks_fit([2], "cuda", gpus=2)
    check_ranks_fit([4], "cpu", gpus=0)  # gloo: ranks share the CPU
    check_ranks_fit([1], "cuda", gpus=0)  # one rank: the rank itself says whether it has a GPU
    # the executable on this machine (no GPU it may use for two ranks): refused with the reason, no rank started
    done = run_executable("AllReduce", [(0, [1024, 2])], tmp_path, DLBENCH_DEVICE="cuda")
    assert done.returncode == 2
    assert "world_size=2 on device=cuda needs 2 GPUs" in done.stderr and "rank exited" not in done.stderr


def test_the_nccl_rank_passes_device_id_only_to_a_torch_that_takes_it(monkeypatch) -> None:
    import torch
    import torch.distributed as dist

    from dlbench.backends.collectives.rank import bound_device

    device = torch.device("cpu")
    assert bound_device(device) == {"device_id": device}  # torch >= 2.3: the communicator bound at once

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1):  # torch 2.1's
        raise AssertionError("not called")

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    assert bound_device(device) == {}


def test_a_ddp_training_with_more_ranks_than_gpus_is_refused_before_it_starts(tmp_path: Path) -> None:
    done = run_dlbench("+benchmark=mlp_ddp", "task=evaluate", "device=cuda", "world_size=2", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "world_size=2 on device=cuda needs 2 GPUs" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("batch_*_ops.csv")), "no rank was started"
