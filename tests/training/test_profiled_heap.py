"""A profiled batch runs on the pages the unprofiled ones use: the profiler's records are carved from the heap's
free blocks, so without a pad the step's tensors of a profiled batch land on fresh pages and fault them in
(a depthwise-separable CNN's profiled batches took thousands of minor faults and ran up to 1.8x an unprofiled
one). The page faults are counted by the kernel (getrusage), independently of dlbench."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from dlbench.core.allocator import allocator_environment

ROOT = Path(__file__).resolve().parents[2]

#: 64 MiB of 1 MiB tensors in use, a pad (or none), then 48 MiB more allocated and written; prints the faults
#: of the write
PADDED = """
import resource, sys, torch
from dlbench.core.allocator import prefault_heap, profile_pad_bytes
from dlbench.core.machine import available_memory_bytes
kept = [torch.ones(1 << 18) for _ in range(64)]
if sys.argv[1] == "pad":
    assert prefault_heap(profile_pad_bytes(available_memory_bytes())) >= 48 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
more = [torch.ones(1 << 18) for _ in range(48)]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

#: a depthwise-separable CNN trained under op_performance_analysis, batches 3 and 4 profiled; "off" replaces
#: the pad by nothing (the control)
CNN = """
import sys, torch
from torch import nn
import dlbench.training.instrument as instrument
from dlbench.instrument import op_performance_analysis
if sys.argv[1] == "off":
    instrument.pad_heap_for_profiling = lambda: 0
torch.set_num_threads(1)
torch.manual_seed(0)
def block(c, o, s):
    return [nn.Conv2d(c, c, 3, s, 1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU6(inplace=True),
            nn.Conv2d(c, o, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU6(inplace=True)]
model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), *block(16, 32, 1), *block(32, 64, 2), *block(64, 64, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
x, y = torch.randn(64, 3, 64, 64), torch.randint(0, 10, (64,))
for step in range(8):
    with op_performance_analysis(step, x, model, False):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
"""


def _run(script: str, arg: str, cwd: Path, extra: dict[str, str] | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **allocator_environment(True), **(extra or {})}
    out = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script, arg], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_a_pad_of_the_kept_heap_serves_the_next_allocations_without_faults(tmp_path: Path) -> None:
    pages = (48 << 20) // 4096
    bare = int(_run(PADDED, "none", tmp_path).strip())
    padded = int(_run(PADDED, "pad", tmp_path).strip())
    assert bare > pages * 0.9, f"without a pad the heap grows onto fresh pages: {bare} faults of {pages}"
    assert padded < pages * 0.05, f"after the pad: {padded} faults of {pages} pages"


def _profiled_faults(mode: str, tmp_path: Path) -> tuple[list[int], list[int]]:
    out = tmp_path / mode
    out.mkdir()
    _run(CNN, mode, out, {"DLBENCH_PROFILE_WARMUP": "3", "DLBENCH_PROFILE_BATCHES": "2",
                          "DLBENCH_PROFILE_DIR": str(out / "profile")})  # fmt: skip
    with open(out / "profile" / "batches.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    profiled = [int(r["minor_faults"]) for r in rows if r["profiled"] == "1"]
    steady = [int(r["minor_faults"]) for r in rows if r["profiled"] == "0" and int(r["step"]) >= 6]
    return profiled, steady


def test_profiled_batches_take_no_more_page_faults_than_the_steady_ones(tmp_path: Path) -> None:
    padded, steady = _profiled_faults("pad", tmp_path)
    control, _ = _profiled_faults("off", tmp_path)
    assert len(padded) == 2 and len(control) == 2
    # the profiler's own first buffers may still fault (about 4 MiB, 1,031 pages, seen once in the first profiled
    # batch); the step's tensors, 16-100 MiB here, must not
    assert sum(control) > 4000, f"without the pad the profiled batches fault their tensors in: {control}"
    assert max(padded) <= 1100 and 4 * sum(padded) < sum(control), (
        f"with the pad: {padded} faults per profiled batch, without: {control} (steady batches: {steady})"
    )
