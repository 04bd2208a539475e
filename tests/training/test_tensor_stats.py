"""The step's tensors recorded in the last warm-up batch: each aten call's dtype, strides and value statistics,
forward and backward, checked against the tensors themselves (numpy as the reference)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from dlbench.training import instrument
from dlbench.training.instrument import ProfileSession, ProfileSettings
from dlbench.training.tensor_stats import ENV_STATS, STATS_FILE, TensorStats, read_stats


class Leaky(torch.nn.Module):
    """A layer, a gain used as a transposed view, a GELU computed in float64."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 48)
        self.gain = torch.nn.Parameter(torch.ones(48, 16))  # used as gain.t(): (16, 48), strides (1, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * self.gain.t()
        return F.gelu(h.double()).float()


def inputs_with_subnormals() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 32, generator=generator)
    x[torch.rand(x.shape, generator=generator) < 0.3] = 1e-40  # subnormal in float32
    x[0, :4] = float("nan")
    return x


def step(model: torch.nn.Module, x: torch.Tensor) -> None:
    loss = model(x).nan_to_num().square().mean()
    loss.backward()


def test_each_call_records_dtype_strides_and_value_fractions_of_its_inputs(tmp_path: Path):
    model, x = Leaky(), inputs_with_subnormals()
    with TensorStats(tmp_path):
        step(model, x)
    machine, calls = read_stats(tmp_path)
    assert machine["torch_threads"] == torch.get_num_threads() and machine["physical_cores"] >= 1
    by_name: dict[str, list] = {}
    for call in calls:
        by_name.setdefault(call["name"], []).extend(
            a["tensor"] for a in call["args"] if isinstance(a, dict) and "tensor" in a
        )
    values = x.numpy()
    tiny = np.finfo(np.float32).tiny
    recorded = next(t for t in by_name["aten::addmm"] if t["shape"] == [16, 32])
    assert recorded["subnormal"] == pytest.approx(float(((np.abs(values) < tiny) & (values != 0)).mean()), abs=1e-9)
    assert recorded["nonfinite"] == pytest.approx(float((~np.isfinite(values)).mean()), abs=1e-9)
    assert any(t["strides"] == [1, 16] and not t["contiguous"] for t in by_name["aten::mul"]), "the gain's view"
    gelu = by_name["aten::gelu"][0]
    assert gelu["dtype"] == "float64" and gelu["shape"] == [16, 48]
    assert "aten::gelu_backward" in by_name, "the backward pass's calls are recorded too"


def test_only_the_last_warmup_batch_records_and_only_when_asked(tmp_path: Path, monkeypatch):
    model, x = Leaky(), inputs_with_subnormals()
    seen_modes: list[int] = []

    def run(out_dir: Path) -> None:
        session = ProfileSession(ProfileSettings(warmup=3, batches=1, out_dir=out_dir))
        for batch_idx in range(6):
            with session.batch(batch_idx):
                seen_modes.append(len(torch.utils._python_dispatch._get_current_dispatch_mode_stack()))
                step(model, x)
        session.finish()

    monkeypatch.setenv(ENV_STATS, "1")
    run(tmp_path / "asked")
    assert seen_modes == [0, 0, 1, 0, 0, 0], "batch 2, the last of three warm-up batches, alone"
    machine, calls = read_stats(tmp_path / "asked")
    assert calls and machine["batch_wall_s"] > 0
    monkeypatch.delenv(ENV_STATS)
    seen_modes.clear()
    run(tmp_path / "plain")
    assert seen_modes == [0] * 6 and not (tmp_path / "plain" / STATS_FILE).exists()


def test_a_busy_child_process_is_seen_beside_the_step(tmp_path: Path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_spin, args=(2.0,), daemon=True)
    child.start()
    try:
        with TensorStats(tmp_path):
            end = 0.0
            import time

            start = time.perf_counter()
            while time.perf_counter() - start < 0.5:  # the batch: half a second of small steps
                end += float(torch.ones(64).sum())
    finally:
        child.join(timeout=10)
    machine, _ = read_stats(tmp_path)
    assert machine["children_runnable_threads"] > 0 or machine["children_busy_cores"] > 0


def _spin(seconds: float) -> None:
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_records_are_json_lines(tmp_path: Path):
    with TensorStats(tmp_path):
        torch.ones(3).add(torch.ones(3), alpha=2)
    lines = (tmp_path / STATS_FILE).read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    assert instrument.ENV_STATS == ENV_STATS


def lscpu_cores_and_cpus() -> tuple[int, int]:
    """Physical cores and logical CPUs among this process's CPUs, as util-linux's lscpu reads the topology."""
    import os
    import subprocess

    allowed = os.sched_getaffinity(0)
    lines = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET"], capture_output=True, text=True, check=True).stdout
    rows = [line.split(",") for line in lines.splitlines() if line and not line.startswith("#")]
    mine = [r for r in rows if int(r[0]) in allowed]
    return len({(r[2], r[1]) for r in mine}), len(mine)


@pytest.mark.skipif(__import__("shutil").which("lscpu") is None, reason="lscpu (util-linux) is not installed")
def test_the_record_counts_physical_cores_and_logical_cpus_apart(tmp_path: Path):
    with TensorStats(tmp_path):
        torch.ones(3).add(torch.ones(3))
    machine, _ = read_stats(tmp_path)
    assert (machine["physical_cores"], machine["logical_cpus"]) == lscpu_cores_and_cpus()
    assert "cores" not in machine, "a count of logical CPUs is not called cores"


@pytest.mark.parametrize("flush", [True, False])
def test_the_record_says_whether_the_step_flushed_subnormals(tmp_path: Path, flush: bool):
    before = torch.set_flush_denormal(flush)  # False where the CPU cannot flush (then nothing to test)
    if flush and not before:
        pytest.skip("this CPU cannot flush subnormals")
    try:
        with TensorStats(tmp_path):
            torch.ones(3).mul(torch.ones(3))
    finally:
        torch.set_flush_denormal(False)
    assert read_stats(tmp_path)[0]["flush_denormal"] is flush
