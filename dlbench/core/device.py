"""The device a run measures on: ``auto`` becomes ``cuda`` where torch sees a GPU, else ``cpu``."""


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
