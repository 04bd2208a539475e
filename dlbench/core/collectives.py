"""The collective operators as data: their descriptors, the bytes one call moves, and the bus-bandwidth factor
that makes their bandwidths comparable across world sizes (as nccl-tests defines them: doc/PERFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Mapping

from dlbench.core.values import Number

#: ``bytes``: the message size in nccl-tests' sense (AllReduce and Broadcast: the buffer; AllGather: the
#: gathered output; ReduceScatter: the input that is scattered); ``world_size``: ranks in the process group.
COLLECTIVE = ["bytes", "world_size"]


def _all_reduce(n: int) -> float:
    return 2 * (n - 1) / n


def _gather_or_scatter(n: int) -> float:
    return (n - 1) / n


#: op type -> its bus-bandwidth factor as a function of the world size: busbw = algbw x factor(n). The
#: factor turns a ring algorithm's algorithm bandwidth into the bandwidth each link carries, so a fabric's
#: figure is the same at every world size.
BUS_FACTORS = {
    "AllReduce": _all_reduce,
    "AllGather": _gather_or_scatter,
    "ReduceScatter": _gather_or_scatter,
    "Broadcast": lambda n: 1.0,
    "SendRecv": lambda n: 1.0,
}
COLLECTIVE_OP_TYPES = tuple(BUS_FACTORS)


def is_collective(op_type: str) -> bool:
    return op_type in BUS_FACTORS


def collective_bytes(p: Mapping[str, Number]) -> float:
    """The message size of one call (algbw = bytes / time)."""
    return float(p["bytes"])


def bus_factor(op_type: str, world_size: int) -> float:
    """busbw / algbw for ``op_type`` among ``world_size`` ranks (0 ranks or an unknown op: 0)."""
    if op_type not in BUS_FACTORS or world_size < 1:
        return 0.0
    return BUS_FACTORS[op_type](int(world_size))


def bandwidths_gbs(op_type: str, p: Mapping[str, Number], median_ms: float) -> tuple[float, float]:
    """Algorithm and bus bandwidth in GB/s (10^9 bytes) of a call of ``median_ms``."""
    if not median_ms or median_ms <= 0:
        return float("nan"), float("nan")
    algbw = collective_bytes(p) / (median_ms * 1e6)
    return algbw, algbw * bus_factor(op_type, int(p.get("world_size", 1)))
