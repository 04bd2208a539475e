"""A system's roofline as a value: peak GFLOP/s per dtype and memory bandwidth, and the bound they set."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Roofline:
    """Peaks of one system: GFLOP/s per dtype, memory bandwidth in GB/s (10^9 bytes per second)."""

    peak_gflops: Mapping[str, float]
    bandwidth_gbs: float
    system_id: str = ""
    run_id: str = ""
    extra: Mapping[str, float] = field(default_factory=dict)

    def peak(self, dtype: str = "float32") -> float:
        """The peak of ``dtype``, else that of float32, else the highest measured."""
        if dtype in self.peak_gflops:
            return self.peak_gflops[dtype]
        if "float32" in self.peak_gflops:
            return self.peak_gflops["float32"]
        return max(self.peak_gflops.values(), default=math.nan)

    def bound(self, intensity: float, dtype: str = "float32") -> float:
        """Attainable GFLOP/s at an arithmetic intensity (FLOP/byte): min(peak, intensity x bandwidth)."""
        return min(self.peak(dtype), intensity * self.bandwidth_gbs)

    def ridge_point(self, dtype: str = "float32") -> float:
        return self.peak(dtype) / self.bandwidth_gbs if self.bandwidth_gbs else math.nan
