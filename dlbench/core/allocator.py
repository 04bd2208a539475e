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
``GLIBC_TUNABLES`` is kept as it is."""

from __future__ import annotations

import ctypes
import functools
import os

KEEP_HEAP_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


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


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, looked up once per process (None without it)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
