"""Cold caches by rotation: a row's tensors are built several times over, and the timed calls cycle through
the copies while the last results stay referenced, so every call reads inputs and writes into an output that
no recent call touched, as a training step does once its working set exceeds the caches. Nothing is done
between calls (no eviction inside or outside the timed interval): the copies are simply too many to stay
cached. The turn itself (an iterator step and an append, about 0.1 us) is inside each timed call."""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch

#: at most this many copies of a row's tensors (a tiny row would otherwise need thousands)
MAX_COPIES = 256


def copies_for(row_bytes: int, footprint_bytes: int) -> int:
    """How many copies of a row of ``row_bytes`` fill ``footprint_bytes`` (1: caches not cooled, or the row
    alone already exceeds the footprint and streams through the caches on every call)."""
    if footprint_bytes <= 0 or row_bytes <= 0 or row_bytes >= footprint_bytes:
        return 1  # (no tensors to speak of: the framework-overhead rows time the dispatch of empty calls)
    return min(MAX_COPIES, math.ceil(footprint_bytes / row_bytes))


def rotated(build: Callable[[], Callable[[], object]], copies: int) -> Callable[[], object]:
    """One callable that calls ``copies`` independently built callables in turn and keeps the last
    ``copies`` results alive, so the allocator cannot hand the next call the output block just freed."""
    if copies <= 1:
        return build()
    calls = itertools.cycle([build() for _ in range(copies)])
    results: deque[object] = deque(maxlen=copies)

    def call() -> object:
        result = next(calls)()
        results.append(result)
        return result

    return call


#: when the last-level cache's size cannot be read
FALLBACK_CACHE_BYTES = 32 << 20


def last_level_cache_bytes(device: torch.device) -> int:
    """The largest cache of the first CPU (sysfs) or the GPU's L2; a fallback of 32 MiB when unknown."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or FALLBACK_CACHE_BYTES
    sizes = [_sysfs_bytes(path) for path in CPU_CACHES.glob("index*/size")]
    return max(sizes, default=0) or FALLBACK_CACHE_BYTES


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _sysfs_bytes(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except OSError:
        return 0
    scale = _UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else 0


def cold_footprint(caches: str, device: torch.device) -> int:
    """Bytes the copies of a row should fill: twice the last-level cache for ``cold`` (beyond it every read
    comes from memory), and the cap of ``step``; 0 for ``hot``."""
    return 2 * last_level_cache_bytes(device) if caches in ("cold", "step") else 0


def row_footprint(caches: str, cap_bytes: int, row_bytes: int, step_bytes: int | None) -> int:
    """Bytes a row's copies fill. ``step``: the operation's reuse distance in its step (``step_bytes``, the
    bytes touched between uses of its inputs) plus its own tensors, which a call touches too, capped at
    ``cap_bytes``; a row without one is timed hot. ``cold``: ``cap_bytes``; ``hot``: 0."""
    if caches != "step":
        return cap_bytes if caches == "cold" else 0
    if step_bytes is None or step_bytes <= 0:
        return 0
    return min(cap_bytes, step_bytes + row_bytes)
