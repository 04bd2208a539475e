"""+benchmark=roofline: the ``roofline`` node."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.core.dtypes import DTYPES


@dataclass
class RooflineConfig:
    """+benchmark=roofline: problem sizes of the peak measurements (shrink them for a quick check)."""

    #: largest square GEMM size n (2 n^3 FLOPs per multiplication); each dtype's size comes from a probe
    gemm_size: int = 4096
    #: seconds one GEMM call should take: the probe sizes each dtype's GEMM to it (up to gemm_size)
    call_s: float = 0.25
    #: MiB per array of the copy and triad bandwidth kernels (well above the last-level cache)
    stream_mib: int = 256
    #: dtypes whose GEMM peak is measured; those the device cannot run are skipped and reported. float32 on a GPU
    #: with TF32 tensor cores is measured twice: IEEE (peak ``float32``) and TF32 (peak ``tf32``)
    dtypes: list[str] = field(default_factory=lambda: list(DTYPES))
    #: seconds each kernel is repeated for (after one warm-up call), at least ``min_reps`` times
    min_time_s: float = 1.0
    min_reps: int = 3
    #: seconds one kernel may take in all, warm-up included (at least one timed call is kept); 0: no limit
    kernel_budget_s: float = 5.0

    def __post_init__(self) -> None:
        if self.gemm_size < 1 or self.stream_mib < 1:
            raise ValueError("roofline.gemm_size and roofline.stream_mib must be >= 1")
        if self.min_reps < 1 or self.min_time_s < 0:
            raise ValueError("roofline.min_reps must be >= 1 and roofline.min_time_s >= 0")
        if self.call_s <= 0 or self.kernel_budget_s < 0:
            raise ValueError("roofline.call_s must be > 0 and roofline.kernel_budget_s >= 0 (0: no limit)")
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise ValueError(f"roofline.dtypes: {dtype!r}; use {', '.join(DTYPES)}")
