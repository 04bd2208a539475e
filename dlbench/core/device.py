"""The device a run measures on: ``auto`` becomes ``cuda`` where torch sees a GPU, else ``cpu``; and whether a
process group's ranks fit the GPUs this machine shows (NCCL runs one rank per GPU)."""

from __future__ import annotations

from collections.abc import Iterable

from dlbench.core.errors import ConfigurationError


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def visible_gpus() -> int:
    """The CUDA devices torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_ranks_fit(world_sizes: Iterable[int], device: str, gpus: int | None = None) -> None:
    """Raise a :class:`ConfigurationError` before any rank starts when a process group on ``device=cuda`` has
    more ranks than the machine has GPUs (``gpus``; None: read here): NCCL gives each rank its own GPU, and
    two ranks on one GPU fail deep inside NCCL with its duplicate-GPU error."""
    largest = max((int(w) for w in world_sizes), default=1)
    if device != "cuda" or largest <= 1:
        return
    gpus = visible_gpus() if gpus is None else gpus
    if largest > gpus:
        raise ConfigurationError(
            f"world_size={largest} on device=cuda needs {largest} GPUs and this machine shows {gpus}: NCCL runs "
            f"one rank per GPU; use world_size<={max(gpus, 1)}, more GPUs (CUDA_VISIBLE_DEVICES), or device=cpu (gloo)"
        )
