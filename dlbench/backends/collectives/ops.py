"""Each collective as a callable on tensors built once per row: nccl-tests' sizes (``bytes`` is the buffer of
AllReduce and Broadcast, AllGather's gathered output, ReduceScatter's input, what SendRecv sends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


class UnsupportedRow(ValueError):
    """A row this process group cannot run (too small a message, one rank for a point-to-point op)."""


def _elements(message_bytes: int, element_size: int, multiple: int) -> int:
    """Elements of the message, rounded down to a multiple of the world size (AllGather, ReduceScatter)."""
    count = message_bytes // element_size // multiple * multiple
    if count < 1:
        raise UnsupportedRow(f"{message_bytes} bytes is less than one element per rank")
    return count


def all_reduce(n: int, rank: int, message_bytes: int, device: torch.device, dtype: torch.dtype) -> Callable[[], Any]:
    buffer = torch.zeros(_elements(message_bytes, dtype.itemsize, 1), device=device, dtype=dtype)
    return lambda: dist.all_reduce(buffer)


def all_gather(n: int, rank: int, message_bytes: int, device: torch.device, dtype: torch.dtype) -> Callable[[], Any]:
    output = torch.zeros(_elements(message_bytes, dtype.itemsize, n), device=device, dtype=dtype)
    pieces = list(output.chunk(n))
    mine = torch.zeros_like(pieces[rank])
    return lambda: dist.all_gather(pieces, mine)


def reduce_scatter(
    n: int, rank: int, message_bytes: int, device: torch.device, dtype: torch.dtype
) -> Callable[[], Any]:
    source = torch.zeros(_elements(message_bytes, dtype.itemsize, n), device=device, dtype=dtype)
    mine = torch.zeros(source.numel() // n, device=device, dtype=dtype)
    reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # torch < 2.10
    return lambda: reduce_scatter_single(mine, source)


def broadcast(n: int, rank: int, message_bytes: int, device: torch.device, dtype: torch.dtype) -> Callable[[], Any]:
    buffer = torch.zeros(_elements(message_bytes, dtype.itemsize, 1), device=device, dtype=dtype)
    return lambda: dist.broadcast(buffer, src=0)


def send_recv(n: int, rank: int, message_bytes: int, device: torch.device, dtype: torch.dtype) -> Callable[[], Any]:
    """Each rank sends to the next and receives from the previous one (a ring step, as nccl-tests does)."""
    if n < 2:
        raise UnsupportedRow("SendRecv needs world_size >= 2")
    count = _elements(message_bytes, dtype.itemsize, 1)
    outgoing = torch.zeros(count, device=device, dtype=dtype)
    incoming = torch.zeros(count, device=device, dtype=dtype)

    def call() -> None:
        requests = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, outgoing, (rank + 1) % n), dist.P2POp(dist.irecv, incoming, (rank - 1) % n)]
        )
        for request in requests:
            request.wait()

    return call


COLLECTIVES = {
    "AllReduce": all_reduce,
    "AllGather": all_gather,
    "ReduceScatter": reduce_scatter,
    "Broadcast": broadcast,
    "SendRecv": send_recv,
}
