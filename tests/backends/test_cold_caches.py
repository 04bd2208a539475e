"""``caches=cold``: the torch kernels rotate over copies of a row's tensors filling twice the last-level
cache, keeping the last outputs alive, so no call finds its tensors in the caches; kernels that cannot do
so refuse the setting instead of timing hot caches under its name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_dlbench

from dlbench.backends.torch import rotation
from dlbench.backends.torch.rotation import (
    MAX_COPIES,
    copies_for,
    copies_for_reuse,
    last_level_cache,
    last_level_cache_bytes,
    rotated,
)
from dlbench.operators.protocol import parse_output, write_input


def test_copies_fill_the_footprint_and_a_row_larger_than_it_is_not_copied() -> None:
    mib = 1 << 20
    assert copies_for(10 * mib, 0) == 1, "hot caches: one set of tensors"
    assert copies_for(10 * mib, 64 * mib) == 7
    assert copies_for(100 * mib, 64 * mib) == 1, "a row larger than the footprint streams through the caches anyway"
    assert copies_for(16, 64 * mib) == MAX_COPIES
    assert copies_for(0, 64 * mib) == 1, "rows without tensors (framework overhead) are not copied"


def test_a_reuse_distance_is_met_by_the_nearest_whole_number_of_other_copies() -> None:
    mib = 1 << 20
    # a 12 MiB row 16 MiB from its last use in the step: one other copy (12 MiB between uses) is nearer than
    # two (24 MiB, which with the row itself cycles 36 MiB through a 32 MiB cache)
    assert copies_for_reuse(12 * mib, 16 * mib, 64 * mib) == 2
    assert copies_for_reuse(12 * mib, 20 * mib, 64 * mib) == 3
    assert copies_for_reuse(1 * mib, 4 * mib, 64 * mib) == 5
    assert copies_for_reuse(12 * mib, 2 * mib, 64 * mib) == 1, "a distance under half a row: the row's own call"
    assert copies_for_reuse(12 * mib, 0, 64 * mib) == 1, "no reuse distance: timed hot"
    assert copies_for_reuse(1 * mib, 512 * mib, 64 * mib) == 64, "capped at the cold footprint"


def test_rotated_calls_take_the_copies_in_turn_and_keep_the_last_outputs_alive() -> None:
    sources: list[torch.Tensor] = []

    def build():
        x = torch.randn(4096)
        sources.append(x)
        return lambda: x * 2

    call = rotated(build, 4)
    assert len(sources) == 4, "one build per copy"
    pointers = []
    for i in range(12):
        out = call()
        torch.testing.assert_close(out, sources[i % 4] * 2)  # the copies in turn
        pointers.append(out.data_ptr())
        del out  # the caller lets go; the rotation still holds the last four
    for start in range(len(pointers) - 4):
        window = pointers[start : start + 5]
        assert len(set(window)) == 5, "an output block is reused only after four newer outputs were written"


#: fault_in's checks, run in an interpreter of their own as the worker runs it: the faults are the process's,
#: and in pytest's process another thread (a finished test's MLflow or profiler thread) faulting during the quiet
#: turn once made it take one turn more
_FAULT_IN_CHECKS = """
import numpy as np
from dlbench.backends.torch.rotation import MAX_FAULT_IN, fault_in

kept = []

def faulting_at_first():  # fresh pages on its first five calls, as new output blocks are
    if len(kept) < 5:
        kept.append(np.ones(1 << 20))

assert fault_in(faulting_at_first, copies=3, warmup=1) == 5 + 3, "five faulting calls, then a quiet turn"
assert fault_in(faulting_at_first, copies=3, warmup=7) == 7, "the warm-up asked for, when quiet already"
kept.clear()

def always_faulting():
    kept.append(np.ones(1 << 18))

assert fault_in(always_faulting, copies=3, warmup=1) == MAX_FAULT_IN * 3, "gives up, timed as it is"
print("checked")
"""


def test_the_warm_up_lasts_until_a_turn_of_the_rotation_takes_no_page_fault() -> None:
    done = subprocess.run([sys.executable, "-c", _FAULT_IN_CHECKS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "checked", done.stderr[-2000:]


def test_the_last_level_cache_is_the_largest_any_cpu_reports_with_a_fallback_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_step_caches import fake_sysfs

    # two L3s of different sizes (two core complexes), a CPU that reports no caches, cpu0 without an L3
    root = fake_sysfs(tmp_path / "cpu", {
        0: [(1, "48K", "0"), (2, "1024K", "0")],
        1: [(1, "48K", "1"), (2, "1024K", "1"), (3, "16384K", "0")],
        2: [(3, "32768K", "1")],
        3: [],
    })  # fmt: skip
    monkeypatch.setattr(rotation, "CPU_ROOT", root)
    assert last_level_cache(torch.device("cpu")) == (32 << 20, "sysfs")
    assert last_level_cache_bytes(torch.device("cpu")) == 32 << 20
    monkeypatch.setattr(rotation, "CPU_ROOT", tmp_path / "absent")
    assert last_level_cache(torch.device("cpu")) == (rotation.FALLBACK_CACHE_BYTES, "fallback")


def test_this_machines_caches_are_read_from_sysfs_as_lscpu_reads_them() -> None:
    import shutil

    if shutil.which("lscpu") is None or not Path("/sys/devices/system/cpu/cpu0/cache").exists():
        pytest.skip("no lscpu or no cache sizes in sysfs here")
    done = subprocess.run(["lscpu", "-C=LEVEL,ONE-SIZE", "-B"], capture_output=True, text=True, check=False)
    levels = [line.split() for line in done.stdout.splitlines()[1:] if line.split()]  # below the header
    if done.returncode != 0 or not levels or not all(row[0].isdigit() and row[1].isdigit() for row in levels):
        pytest.skip("this lscpu cannot list caches")
    top = max(levels, key=lambda row: (int(row[0]), int(row[1])))
    assert last_level_cache(torch.device("cpu")) == (int(top[1]), "sysfs")


def _relu(tmp_path: Path, caches: str) -> subprocess.CompletedProcess[str]:
    path = write_input(tmp_path / "Relu.csv", [(0, [8, 16, 32, 32, 0]), (1, [8, 16, 32, 32, 1])])
    env = {**os.environ, "DLBENCH_MIN_REPS": "3", "DLBENCH_MIN_TIME_S": "0", "DLBENCH_WARMUP": "1",
           "DLBENCH_THREADS": "1", "DLBENCH_CACHES": caches}  # fmt: skip
    return subprocess.run(  # noqa: S603 - this interpreter, a fixed module
        [sys.executable, "-m", "dlbench.backends.torch", "Relu", str(path)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_torch_executable_measures_every_row_with_cold_caches(tmp_path: Path) -> None:
    done = _relu(tmp_path, "cold")
    assert done.returncode == 0, done.stderr
    rows = parse_output(tmp_path / "Relu_out.csv", [0, 1]).rows
    assert sorted(rows) == [0, 1] and all(r.median_ms > 0 and r.reps >= 3 for r in rows.values())


def test_an_unknown_cache_state_is_a_usage_error_naming_the_variable(tmp_path: Path) -> None:
    done = _relu(tmp_path, "warm")
    assert done.returncode == 2
    assert "DLBENCH_CACHES='warm': use one of hot, cold" in done.stderr


def test_an_evaluation_on_a_hot_only_backend_is_refused_before_training(tmp_path: Path) -> None:
    result = run_dlbench("+benchmark=mlp", "task=evaluate", "backend=onednn", cwd=tmp_path, timeout=120)
    assert result.returncode != 0
    assert "backend=onednn times its kernels with hot caches only" in result.stderr
    assert "evaluate.caches=hot" in result.stderr and "Traceback" not in result.stderr
