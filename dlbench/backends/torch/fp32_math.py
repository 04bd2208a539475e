"""``fp32_math`` as PyTorch's switches: whether cuBLAS matmuls and cuDNN convolutions may compute float32 on
TF32 tensor cores. Set on every request, since one worker process serves requests of any setting."""

from __future__ import annotations

import torch

from dlbench.core.settings import FP32_MATHS

#: fp32_math -> (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
SWITCHES = {
    "ieee": (False, False),
    "tf32": (True, True),
    "framework": (False, True),  # PyTorch's own defaults
}
assert set(SWITCHES) == set(FP32_MATHS)


def apply_fp32_math(fp32_math: str) -> None:
    """Set PyTorch's TF32 switches for ``fp32_math`` (ieee, tf32 or framework); ValueError for another value."""
    if fp32_math not in SWITCHES:
        raise ValueError(f"DLBENCH_FP32_MATH={fp32_math!r}: use one of {', '.join(FP32_MATHS)}")
    matmul, cudnn = SWITCHES[fp32_math]
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


def current_fp32_math() -> str:
    """The fp32_math PyTorch's switches now say (``custom`` for a combination none of them sets)."""
    now = (bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32))
    return next((name for name, switches in SWITCHES.items() if switches == now), "custom")
