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

from dlbench.core.allocator import allocated_bytes, minor_faults

#: at most this many copies of a row's tensors (a tiny row would otherwise need thousands)
MAX_COPIES = 256


def copies_for(row_bytes: int, footprint_bytes: int) -> int:
    """How many copies of a row of ``row_bytes`` fill ``footprint_bytes`` (1: caches not cooled, or the row
    alone already exceeds the footprint and streams through the caches on every call), at most
    :data:`MAX_COPIES`."""
    return min(MAX_COPIES, _wanted_copies(row_bytes, footprint_bytes))


def _wanted_copies(row_bytes: int, footprint_bytes: int) -> int:
    if footprint_bytes <= 0 or row_bytes <= 0 or row_bytes >= footprint_bytes:
        return 1  # (no tensors to speak of: the framework-overhead rows time the dispatch of empty calls)
    return math.ceil(footprint_bytes / row_bytes)


def copies_for_reuse(row_bytes: int, reuse_bytes: int, cap_bytes: int) -> int:
    """How many copies of a row put its reuse distance in the benchmark nearest ``reuse_bytes``, the bytes its
    step touches between uses of its inputs: a call touches the other ``copies - 1`` rows before its own comes
    round again. Rounded to the nearest whole row, not up: rounding up overshot by up to a row (a 12.6 MB GELU
    backward at a 16.8 MB reuse distance rotated 37.7 MB through a 32 MiB L3 and ran at memory speed, 2.4x its
    time in the step). Never more than fill ``cap_bytes``; 1 without a reuse distance (timed hot)."""
    return min(MAX_COPIES, _wanted_for_reuse(row_bytes, reuse_bytes, cap_bytes))


def _wanted_for_reuse(row_bytes: int, reuse_bytes: int, cap_bytes: int) -> int:
    if reuse_bytes <= 0 or row_bytes <= 0:
        return 1
    return min(1 + round(reuse_bytes / row_bytes), _wanted_copies(row_bytes, cap_bytes))


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


#: turns of the rotation :func:`fault_in` waits for one without faults
MAX_FAULT_IN = 4


def fault_in(call: Callable[[], object], copies: int, warmup: int) -> int:
    """Call ``call`` until a whole turn of the rotation (``copies`` calls, at least two) took no page fault,
    and at least ``warmup`` times; return the calls made. A training step on the kept heap takes no faults once
    warm; a benchmark's first calls put their outputs on blocks no earlier call freed and fault each page in
    (a 2 MiB GELU backward: 512 faults and 1.4-1.7 ms on each of its first 3 to 6 calls, 0.45 ms after), and
    how many calls that takes depends on the copies and the allocator, not on a fixed warm-up. Gives up after
    :data:`MAX_FAULT_IN` turns (a kernel that faults on every call is then timed as it is)."""
    turn, quiet, calls = max(copies, 2), 0, 0
    while calls < warmup or (quiet < turn and calls < MAX_FAULT_IN * turn):
        before = minor_faults()
        call()
        calls += 1
        quiet = quiet + 1 if minor_faults() == before else 0
    return calls


def touched_bytes(build: Callable[[], Callable[[], object]], device: torch.device) -> int:
    """The bytes one copy of a row holds, its output included: built and called, as the allocator counts
    them (the C library's on a CPU, torch's caching allocator on a GPU), then let go; the fewer of two tries,
    so what a process allocates once (the autograd engine's first backward: 11.7 MB) is not the row's; 0 where
    the allocator cannot tell. A kernel reads and writes about these bytes per call; :func:`copies_for_reuse`
    counts in them, where the upper estimate that guards memory would count a Mul backward's 10 MiB as 19 MB."""
    allocated = _allocated(device)
    return max(min(_held(build, allocated) for _ in range(2)), 0)


def _held(build: Callable[[], Callable[[], object]], allocated: Callable[[], int]) -> int:
    before = allocated()
    call = build()
    result = call()
    held = allocated() - before
    del call, result
    return held


def _allocated(device: torch.device) -> Callable[[], int]:
    if device.type == "cuda":
        return lambda: torch.cuda.memory_allocated(device)
    return allocated_bytes


#: when the last-level cache's size cannot be read (the rotation files say ``cap_source=fallback``)
FALLBACK_CACHE_BYTES = 32 << 20
#: where Linux lists each CPU's caches (``cpu<N>/cache/index<K>/{level,size,id,type}``)
CPU_ROOT = Path("/sys/devices/system/cpu")


def last_level_cache(device: torch.device) -> tuple[int, str]:
    """The last-level cache's bytes and where they came from: ``sysfs`` (the largest cache of the highest
    level any CPU reports: two core complexes' L3s are two caches, a process reads one), ``gpu`` (its L2), or
    ``fallback`` (:data:`FALLBACK_CACHE_BYTES`, assumed where neither says)."""
    if device.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
        return (l2, "gpu") if l2 else (FALLBACK_CACHE_BYTES, "fallback")
    caches = cpu_caches()
    if not caches:
        return FALLBACK_CACHE_BYTES, "fallback"
    top = max(level for level, _ in caches)
    return max(size for (level, _), size in caches.items() if level == top), "sysfs"


def last_level_cache_bytes(device: torch.device) -> int:
    """The last-level cache's bytes (:func:`last_level_cache`)."""
    return last_level_cache(device)[0]


def cpu_caches(root: Path | None = None) -> dict[tuple[int, str], int]:
    """Every data or unified cache any CPU reports, once per cache: ``(level, id) -> bytes`` (the id, else
    the CPUs sharing it, tells two caches of one level apart; a cache shared by several CPUs is listed under
    each)."""
    out: dict[tuple[int, str], int] = {}
    for index in sorted((root or CPU_ROOT).glob("cpu[0-9]*/cache/index[0-9]*")):
        if _sysfs_text(index / "type") == "Instruction":
            continue
        level, size = _sysfs_text(index / "level"), _sysfs_bytes(index / "size")
        if not level.isdigit() or size <= 0:
            continue
        ident = _sysfs_text(index / "id") or _sysfs_text(index / "shared_cpu_list") or str(index)
        key = (int(level), ident)
        out[key] = max(out.get(key, 0), size)
    return out


def _sysfs_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _sysfs_bytes(path: Path) -> int:
    text = _sysfs_text(path)
    scale = _UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else 0


def cold_footprint(caches: str, device: torch.device) -> int:
    """Bytes the copies of a row should fill: twice the last-level cache for ``cold`` (beyond it every read
    comes from memory), and the cap of ``step``; 0 for ``hot``."""
    return cache_cap(caches, device)[0]


def cache_cap(caches: str, device: torch.device) -> tuple[int, str]:
    """:func:`cold_footprint` and where the cache's size came from (:func:`last_level_cache`; ``hot``: none)."""
    if caches not in ("cold", "step"):
        return 0, "none"
    size, source = last_level_cache(device)
    return 2 * size, source


def row_copies(caches: str, cap_bytes: int, row_bytes: int, step_bytes: int | None) -> tuple[int, bool]:
    """How many copies a row rotates over, and whether :data:`MAX_COPIES` cut them (a tiny row then rotates
    over fewer bytes than asked: its caches are warmer than the rule says). ``step``: its operation's reuse
    distance in its step (``step_bytes``, :func:`copies_for_reuse`); a row without one is timed hot.
    ``cold``: copies filling ``cap_bytes``; ``hot``: 1."""
    if caches == "step":
        wanted = _wanted_for_reuse(row_bytes, step_bytes or 0, cap_bytes)
    else:
        wanted = _wanted_copies(row_bytes, cap_bytes) if caches == "cold" else 1
    return min(MAX_COPIES, wanted), wanted > MAX_COPIES
