"""How the C library's allocator treats freed memory in the processes dlbench measures.

glibc hands a freed block of more than 128 KiB-32 MiB (its adaptive mmap threshold) back to the operating
system, and trims the heap top above 128 KiB. A kernel that allocates its output on every call, as PyTorch
eager does, then pays a page fault per 4 KiB of output on every call: a 2 MiB convolution output costs more in
faults than the convolution itself, and whether a call faults depends on what ran before it (a benchmark
repeating one operation and a training step interleaving many see different costs for the same kernel).

``keep_heap=true`` (the default) starts every benchmark executable and every training script with the
allocator keeping freed memory (``GLIBC_TUNABLES``: mmap threshold 32 MiB, the most glibc accepts on 64-bit,
trim threshold 1 GiB), so both sides run on a warm heap, as they do with the jemalloc/tcmalloc that PyTorch's
CPU performance guides recommend. Blocks above 32 MiB are still mapped per call on both sides. A user's own
``GLIBC_TUNABLES`` is kept as it is.

A profiled batch grows the heap: the profiler's own records are carved from the free blocks a step's tensors
left, so the step's tensors are then placed on fresh pages and fault them in (a MobileNet-style step at batch
64 took 8,000-32,000 minor faults and ran 1.2-1.8x its unprofiled time; every other batch took none).
:func:`prefault_heap` touches, then frees, as many bytes as the heap already holds just before a profiled batch,
so that batch grows into pages already faulted in (the kept heap does not return them)."""

from __future__ import annotations

import ctypes
import functools
import os
import resource

from dlbench.core.machine import available_memory_bytes

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30
KEEP_HEAP_TUNABLES = f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"
#: a heap pad is touched in pieces under the mmap threshold, so they come from (and go back to) the heap
PAD_PIECE = MMAP_THRESHOLD // 2


def allocator_environment(keep_heap: bool) -> dict[str, str]:
    """The variables a measured process is started with (none when ``keep_heap`` is off or the user set
    ``GLIBC_TUNABLES`` themselves)."""
    if not keep_heap or "GLIBC_TUNABLES" in os.environ:
        return {}
    return {"GLIBC_TUNABLES": KEEP_HEAP_TUNABLES}


def release_free_heap() -> bool:
    """Hand the heap's free memory back to the operating system (glibc's ``malloc_trim``); False where the C
    library has no such call.

    A benchmark process that measures many rows otherwise keeps what earlier rows freed (the trim threshold
    above is 1 GiB), and a later row's tensors of 32 MiB or more, which training maps afresh and faults in on
    every step, are then carved from that warm heap: the same row measured 30 ms in one run and 12 ms in the
    next, depending on the rows before it. Trimming before each row starts every row from the same heap."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _malloc_trim():
    """glibc's ``malloc_trim`` (None without it)."""
    libc = _libc()
    return libc.malloc_trim if libc is not None else None


def keeps_heap() -> bool:
    """True in a process started with :data:`KEEP_HEAP_TUNABLES` (what the heap is given, it keeps)."""
    return os.environ.get("GLIBC_TUNABLES") == KEEP_HEAP_TUNABLES


def minor_faults() -> int:
    """Minor page faults this process has taken so far (a fresh page touched for the first time)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]  # fmt: skip


def heap_in_use() -> int:
    """Bytes in use in the main heap (glibc's ``mallinfo2().uordblks``); 0 where it cannot be read."""
    info = _mallinfo2()
    return int(info.uordblks) if info is not None else 0


def allocated_bytes() -> int:
    """Bytes the C library's allocator has handed out and not had back, heap and mapped blocks alike
    (``mallinfo2``: ``uordblks + hblkhd``); 0 where it cannot be read."""
    info = _mallinfo2()
    return int(info.uordblks) + int(info.hblkhd) if info is not None else 0


def _mallinfo2() -> _Mallinfo2 | None:
    """The allocator's statistics now; None without glibc's ``mallinfo2``."""
    libc = _libc()
    return libc.mallinfo2() if libc is not None and hasattr(libc, "mallinfo2") else None


def prefault_heap(nbytes: int) -> int:
    """Allocate ``nbytes`` in pieces below the mmap threshold, write every page, free them all: the heap then
    holds that much free memory already faulted in (only useful where :func:`keeps_heap`). Returns the bytes
    touched (0 without glibc's malloc)."""
    libc = _libc()
    if libc is None or nbytes <= 0:
        return 0
    pieces = []
    try:
        for _ in range(-(-nbytes // PAD_PIECE)):
            block = libc.malloc(PAD_PIECE)
            if not block:
                break
            ctypes.memset(block, 0, PAD_PIECE)
            pieces.append(block)
    finally:
        for block in pieces:
            libc.free(block)
    return len(pieces) * PAD_PIECE


def profile_pad_bytes(available_bytes: int) -> int:
    """The pad before a profiled batch: as many bytes as the heap has in use (the step's tensors; the pad's
    pieces first fill the free holes, which are faulted in already, then grow the top of the heap, where a
    displaced tensor lands), at most half the trim threshold (a larger free top would be handed back) and a
    quarter of the memory still available."""
    return max(0, min(heap_in_use(), TRIM_THRESHOLD // 2, available_bytes // 4))


def pad_heap_for_profiling() -> int:
    """Before a profiled batch, in a process that keeps its heap: :func:`prefault_heap` by
    :func:`profile_pad_bytes`, so the profiler's records cannot push the step's tensors onto fresh pages.
    Returns the bytes touched (0 where the heap is not kept: a pad would be handed straight back)."""
    if not keeps_heap():
        return 0
    return prefault_heap(profile_pad_bytes(available_memory_bytes()))


@functools.cache
def _libc():
    """The C library of this process, where it has glibc's ``malloc_trim`` (None elsewhere), with the
    prototypes of the calls made here declared once."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc
