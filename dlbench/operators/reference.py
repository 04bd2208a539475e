"""The machine's own speed over a task: fixed reference operations timed before the work and again after it.

A prediction compares measurements taken minutes apart (the training, then the operator benchmarks). On a
shared or virtual machine the same kernel can run 2x slower ten minutes later, and that drift lands in the
prediction error whatever the method. The reference operations (a compute-bound GEMM and a ResNet-style
convolution, timed with the benchmarks' settings but hot caches, after an untimed round) say how far the
machine moved between the two ends, as far as both agree; the evaluation reports it beside the error. It is
a diagnosis, never a correction: nothing is rescaled.

Beside them, a memory probe: STREAM's triad (``a = b + s * c``) over arrays twice the machine's
last-level caches (read from sysfs over every CPU), timed in this process with numpy. A neighbour that takes
memory bandwidth slows it where the compute-bound references barely move, and a change of library (the torch
build B runs) does not move it at all."""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dlbench.core.values import Measurement, Operation
from dlbench.operators.registry import OperatorBenchmark, Registry

#: |drift| above which an evaluation says its error includes the machine's change of speed
DRIFT_LIMIT_PCT = 10.0

REFERENCE_OPERATIONS = (
    Operation(
        0,
        "Gemm",
        (("M", 512), ("K", 512), ("N", 512), ("transA", 0), ("transB", 0), ("batch", 1)),
        name="reference_gemm_512",
        flops=2.0 * 512**3,
    ),
    Operation(
        1,
        "Conv",
        (
            ("N", 1),
            ("C", 64),
            ("H", 56),
            ("W", 56),
            ("K", 64),
            ("kernel_shape_0", 3),
            ("kernel_shape_1", 3),
            ("pads_0", 1),
            ("pads_1", 1),
            ("pads_2", 1),
            ("pads_3", 1),
            ("strides_0", 1),
            ("strides_1", 1),
            ("dilations_0", 1),
            ("dilations_1", 1),
            ("group", 1),
            ("has_bias", 0),
            ("mode", 0),
        ),
        name="reference_conv_3x3",
        flops=2.0 * 64 * 56 * 56 * 64 * 9,
    ),
)


def _conv_params(n: int, c: int, hw: int, k: int) -> dict[str, int]:
    return {**dict(REFERENCE_OPERATIONS[1].params), "N": n, "C": c, "H": hw, "W": hw, "K": k}


#: On a GPU the CPU's references are launch-bound (a 512^3 GEMM takes ~5 us on an H200, the launch about
#: as long, and clocks ramp from idle under such short kernels), so their time says how busy the host was,
#: not how fast the device is. These run for milliseconds each on a large GPU (device time from CUDA events).
GPU_REFERENCE_OPERATIONS = (
    Operation(
        0,
        "Gemm",
        (("M", 4096), ("K", 4096), ("N", 4096), ("transA", 0), ("transB", 0), ("batch", 1)),
        name="reference_gemm_4096",
        flops=2.0 * 4096**3,
    ),
    Operation(
        1,
        "Conv",
        tuple(_conv_params(64, 256, 56, 256).items()),
        name="reference_conv_3x3_n64",
        flops=2.0 * 64 * 256 * 56 * 56 * 256 * 9,
    ),
)

#: Times the references run untimed first: on a GPU the device's clocks come up from idle; on a CPU the
#: worker's first calls of a kernel set it up (oneDNN's primitives) and the cores come back from the training
#: or the sweep before, so the timed round measures the machine, not its warming up.
WARMUP_ROUNDS = 1
GPU_WARMUP_ROUNDS = WARMUP_ROUNDS


def probe_settings(settings: Any) -> Any:
    """The benchmarks' settings (:class:`dlbench.operators.runner.RunSettings`) for a reading of the
    references: hot caches whatever the benchmarks use, so a reading is the cores' speed and not where the
    last work left the references' tensors (rotated copies of twice the last-level cache are a memory test,
    and a step's footprint is not theirs), and alone (no copies beside them: the cores' speed, not a load's)."""
    return replace(settings, caches="hot", beside=0)


def consensus_pct(changes: Iterable[float]) -> float:
    """The change every reference agrees on: when all moved the same way, the smallest move (with its sign);
    when they disagree (one faster, one slower) 0, since a machine that changed speed moves every kernel the
    same way and one reference alone moving is that reading's noise; NaN without changes."""
    values = [c for c in changes if math.isfinite(c)]
    if not values:
        return math.nan
    if all(c > 0 for c in values) or all(c < 0 for c in values):
        return min(values, key=abs)
    return 0.0


def reference_operations(device: str) -> tuple[Operation, ...]:
    """The reference operations for ``device``: device-bound sizes on a GPU."""
    return GPU_REFERENCE_OPERATIONS if device == "cuda" else REFERENCE_OPERATIONS


def reference_benchmarks(registry: Registry, device: str) -> list[tuple[OperatorBenchmark, Operation]]:
    """Each reference operation for ``device`` with PyTorch's benchmark of it there; those without one
    available here are left out."""
    chosen = []
    for op in reference_operations(device):
        entries = registry.serving(op.op_type, "torch", device)
        if entries and not entries[0].unavailable_reason:
            chosen.append((entries[0], op))
    return chosen


def reference_medians(measurements: Mapping[int, Measurement], device: str = "cpu") -> dict[str, float]:
    """Median ms of each reference operation that was measured, by name."""
    out = {}
    for op in reference_operations(device):
        m = measurements.get(op.id)
        if m is not None and m.ok:
            out[op.name] = m.stats.median_ms
    return out


@dataclass(frozen=True)
class Drift:
    """The reference operations' medians before and after the work (ms, by name)."""

    before_ms: Mapping[str, float]
    after_ms: Mapping[str, float]

    @property
    def change_pct(self) -> dict[str, float]:
        """How much slower (+) or faster (-) each reference ran at the end than at the start."""
        return {
            name: (self.after_ms[name] / ms - 1.0) * 100.0
            for name, ms in self.before_ms.items()
            if name in self.after_ms and ms > 0
        }

    @property
    def largest_pct(self) -> float:
        """The change all references agree on (:func:`consensus_pct`), with its sign; NaN when no reference
        was measured at both ends."""
        return consensus_pct(self.change_pct.values())

    def metrics(self) -> dict[str, float]:
        out = {"machine_drift_pct": self.largest_pct}
        for name, ms in self.before_ms.items():
            out[f"drift/{name}/before_ms"] = ms
        for name, ms in self.after_ms.items():
            out[f"drift/{name}/after_ms"] = ms
        return out

    def note(self, limit_pct: float = DRIFT_LIMIT_PCT) -> str:
        """A sentence for the run's notes and status when the machine moved by more than ``limit_pct``."""
        largest = self.largest_pct
        if not math.isfinite(largest) or abs(largest) <= limit_pct:
            return ""
        changes = ", ".join(f"{name} {pct:+.1f}%" for name, pct in self.change_pct.items())
        return (
            f"the machine's speed changed during the evaluation: reference operations timed before the training "
            f"and after the benchmarks differ by {changes} (limit {limit_pct:g}%); the prediction error includes "
            "that drift - rerun on a quieter machine"
        )


#: the memory probe's name among the reference probe's readings (``drift/stream_triad/before_ms``)
TRIAD_NAME = "stream_triad"
#: each array twice the caches' total, so no pass finds its data in a cache (STREAM asks four times, for a
#: bandwidth figure to publish; a movement between readings needs only that the data come from memory, and
#: three arrays of twice a 32 MiB L3 already take seconds to fault in on a busy VM)
TRIAD_CACHE_MULTIPLE = 2
#: the last-level cache assumed where sysfs lists none (a container without /sys/devices/system/cpu), said so
FALLBACK_CACHE_BYTES = 32 * 2**20
#: elements per chunk of the triad: ``scalar * c`` of a chunk stays in a core's L2, so a pass reads b and c and
#: writes a once, as STREAM's fused loop does
TRIAD_CHUNK = 32768
CPU_ROOT = Path("/sys/devices/system/cpu")


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text or 0)


def last_level_caches(root: Path = CPU_ROOT) -> tuple[int, str]:
    """The bytes of every last-level cache of the machine, each counted once (caches are listed per CPU and
    shared by the CPUs of ``shared_cpu_list``: a socket's L3 appears once per core), summed over every CPU's
    caches in sysfs; and where the figure came from. Falls back to :data:`FALLBACK_CACHE_BYTES`, saying so."""
    caches: dict[tuple[int, str], int] = {}
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
            caches[(level, shared)] = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
    if not caches:
        return FALLBACK_CACHE_BYTES, f"{root} lists no caches: {FALLBACK_CACHE_BYTES >> 20} MiB assumed"
    top = max(level for level, _ in caches)
    found = [size for (level, _), size in caches.items() if level == top]
    return sum(found), f"{len(found)} L{top} cache(s) in {root}, {sum(found) >> 20} MiB in all"


def triad_elements(cache_bytes: int) -> int:
    """Elements (float64) of each of the triad's three arrays: :data:`TRIAD_CACHE_MULTIPLE` times the caches."""
    return max(TRIAD_CACHE_MULTIPLE * cache_bytes // 8, TRIAD_CHUNK)


def triad(a: Any, b: Any, c: Any, scalar: float) -> None:
    """STREAM's triad, ``a = b + scalar * c``, chunk by chunk (the product of a chunk stays in cache)."""
    import numpy as np

    scratch = np.empty(TRIAD_CHUNK)
    for start in range(0, len(a), TRIAD_CHUNK):
        end = min(start + TRIAD_CHUNK, len(a))
        part = scratch[: end - start]
        np.multiply(c[start:end], scalar, out=part)
        np.add(b[start:end], part, out=a[start:end])


#: the triad's arrays, kept between readings (faulting 3 x 64 MiB in takes seconds on a busy VM)
_BUFFERS: dict[int, tuple[Any, Any, Any]] = {}


def triad_ms(elements: int, passes: int = 3) -> float:
    """The median ms of ``passes`` triads over arrays of ``elements``: the machine's memory bandwidth as one time,
    24 bytes per element moved (``24 * elements / ms / 1e6`` GB/s, STREAM's count). The arrays are made (and
    their pages faulted in) at the first reading and kept until :func:`release_triad`."""
    import numpy as np

    if elements not in _BUFFERS:
        release_triad()
        _BUFFERS[elements] = (np.zeros(elements), np.full(elements, 1.0), np.full(elements, 2.0))
    a, b, c = _BUFFERS[elements]
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        triad(a, b, c, 3.0)
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


def release_triad() -> None:
    """Give the triad's arrays back (at a sweep's end)."""
    _BUFFERS.clear()


@functools.cache
def machine_triad_elements() -> int:
    """The triad's array size on this machine (:func:`last_level_caches`, :func:`triad_elements`)."""
    return triad_elements(last_level_caches()[0])
