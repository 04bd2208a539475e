"""A system's roofline as a value: peak GFLOP/s per ceiling and memory bandwidth, and the bound they set.

A ceiling is a dtype and, for float32, its math: ``float32`` (IEEE), ``tf32`` (float32 data on TF32 tensor
cores), ``float16``, ``bfloat16``. An operation is only ever scored against the ceiling of what it computed
in; a ceiling that was not measured gives no score (never another dtype's or math's)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

#: operators whose float32 runs on TF32 tensor cores under fp32_math=framework (PyTorch's default:
#: torch.backends.cudnn.allow_tf32 = True, torch.backends.cuda.matmul.allow_tf32 = False)
FRAMEWORK_TF32_OPS = frozenset({"Conv", "ConvTranspose"})


def fp32_math_of(dtype: str, fp32_math: str, op_type: str, device: str) -> str:
    """The math a float32 operation computed in, ``ieee`` or ``tf32``; empty for other dtypes. The CPU computes
    float32 in IEEE; ``framework`` is PyTorch's default (TF32 for cuDNN convolutions only)."""
    if dtype != "float32":
        return ""
    if device == "cpu":
        return "ieee"
    if fp32_math == "framework":
        return "tf32" if op_type in FRAMEWORK_TF32_OPS else "ieee"
    return fp32_math


def ceiling_key(dtype: str, math_name: str = "") -> str:
    """The roofline's name of the ceiling of ``dtype`` computed in ``math_name`` (``tf32`` for TF32 float32)."""
    return "tf32" if dtype == "float32" and math_name == "tf32" else dtype


def ceiling_label(dtype: str, math_name: str = "") -> str:
    """``float32/ieee``, ``float32/tf32``, ``bfloat16``: how messages name a ceiling."""
    return f"{dtype}/{math_name or 'ieee'}" if dtype == "float32" else dtype


@dataclass(frozen=True)
class Roofline:
    """Peaks of one system: GFLOP/s per ceiling (:func:`ceiling_key`), memory bandwidth in GB/s (10^9 bytes
    per second)."""

    peak_gflops: Mapping[str, float]
    bandwidth_gbs: float
    system_id: str = ""
    run_id: str = ""
    extra: Mapping[str, float] = field(default_factory=dict)

    def peak(self, dtype: str = "float32", math_name: str = "") -> float | None:
        """The measured peak of ``dtype`` in ``math_name``, or None when that ceiling was not measured."""
        return self.peak_gflops.get(ceiling_key(dtype, math_name))

    def missing(self, dtype: str, math_name: str = "") -> str:
        """Why an operation of ``dtype``/``math_name`` gets no score here, or empty when it gets one."""
        if self.peak(dtype, math_name) is not None:
            return ""
        return (
            f"no ceiling measured for {ceiling_label(dtype, math_name)} (run {self.run_id or '?'} measured "
            f"{', '.join(sorted(self.peak_gflops)) or 'none'}); run `+benchmark=roofline` on this device with "
            "that dtype in roofline.dtypes"
        )

    def bound(self, intensity: float, dtype: str = "float32", math_name: str = "") -> float:
        """Attainable GFLOP/s at an arithmetic intensity (FLOP/byte): min(peak, intensity x bandwidth); NaN
        without a measured ceiling."""
        peak = self.peak(dtype, math_name)
        return math.nan if peak is None else min(peak, intensity * self.bandwidth_gbs)

    def ridge_point(self, dtype: str = "float32", math_name: str = "") -> float:
        peak = self.peak(dtype, math_name)
        return peak / self.bandwidth_gbs if peak is not None and self.bandwidth_gbs else math.nan
