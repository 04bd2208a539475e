"""The machine's peaks measured with torch: GEMM GFLOP/s per dtype and memory bandwidth (copy, triad)."""

from __future__ import annotations

import logging
import math

import pandas as pd

from dlbench.config import DlbenchConfig
from dlbench.core.roofline import Roofline

log = logging.getLogger(__name__)


def _timed(fn, min_time_s: float, min_reps: int, synchronize) -> list[float]:
    """Seconds per call: one warm-up call, then at least ``min_reps`` calls and ``min_time_s`` seconds."""
    import time

    fn()
    synchronize()
    samples: list[float] = []
    while len(samples) < min_reps or sum(samples) < min_time_s:
        start = time.perf_counter()
        fn()
        synchronize()
        samples.append(time.perf_counter() - start)
        if len(samples) >= 10_000:
            break
    return samples


def _synchronizer(device: str):
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def measure_gemm_peak(n: int, dtype: str, device: str, min_time_s: float, min_reps: int) -> dict[str, float]:
    """GFLOP/s of an n x n x n matrix multiplication (2 n^3 FLOPs): best and median over repetitions."""
    import torch

    torch_dtype = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    samples = _timed(lambda: torch.mm(a, b, out=out), min_time_s, min_reps, _synchronizer(device))
    flops = 2.0 * n**3
    return {"best": flops / min(samples) / 1e9, "median": flops / _median(samples) / 1e9, "reps": len(samples)}


def measure_bandwidth(mib: int, device: str, min_time_s: float, min_reps: int) -> dict[str, float]:
    """GB/s of a copy (b = a: 2 arrays moved) and a triad (a = b + s c: 3 arrays), float32 arrays of
    ``mib`` MiB each, best over repetitions (the attainable bandwidth)."""
    import torch

    elements = mib * 2**20 // 4
    a = torch.rand(elements, device=device)
    b = torch.rand(elements, device=device)
    c = torch.rand(elements, device=device)
    sync = _synchronizer(device)
    array_bytes = 4.0 * elements
    copy = _timed(lambda: b.copy_(a), min_time_s, min_reps, sync)
    triad = _timed(lambda: torch.add(b, c, alpha=3.0, out=a), min_time_s, min_reps, sync)
    return {
        "copy": 2 * array_bytes / min(copy) / 1e9,
        "triad": 3 * array_bytes / min(triad) / 1e9,
        "copy_median": 2 * array_bytes / _median(copy) / 1e9,
        "triad_median": 3 * array_bytes / _median(triad) / 1e9,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def dtype_supported(dtype: str, device: str) -> str:
    """Empty when a GEMM of ``dtype`` runs on ``device``, else why not."""
    import torch

    try:
        x = torch.ones(8, 8, device=device, dtype=getattr(torch, dtype))
        torch.mm(x, x)
    except (RuntimeError, TypeError) as err:
        return str(err).splitlines()[0]
    return ""


def measure_roofline(cfg: DlbenchConfig, device: str) -> tuple[Roofline, pd.DataFrame, dict[str, str]]:
    """Measure the peaks configured in ``cfg.roofline``; returns them, a table, and skipped dtypes."""
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    settings = cfg.roofline
    rows = []
    peaks: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for dtype in settings.dtypes:
        reason = dtype_supported(dtype, device)
        if reason:
            skipped[dtype] = reason
            log.warning("roofline: %s GEMM does not run on %s: %s", dtype, device, reason)
            continue
        result = measure_gemm_peak(settings.gemm_size, dtype, device, settings.min_time_s, settings.min_reps)
        peaks[dtype] = result["best"]
        rows.append(
            {"kernel": f"gemm_{dtype}", "size": settings.gemm_size, "unit": "GFLOP/s", "best": result["best"],
             "median": result["median"], "reps": result["reps"]}
        )  # fmt: skip
    bandwidth = measure_bandwidth(settings.stream_mib, device, settings.min_time_s, settings.min_reps)
    for kernel in ("copy", "triad"):
        rows.append(
            {"kernel": kernel, "size": settings.stream_mib, "unit": "GB/s", "best": bandwidth[kernel],
             "median": bandwidth[f"{kernel}_median"], "reps": math.nan}
        )  # fmt: skip
    roofline = Roofline(
        peak_gflops=peaks,
        bandwidth_gbs=max(bandwidth["copy"], bandwidth["triad"]),
        extra={"bandwidth_copy_gbs": bandwidth["copy"], "bandwidth_triad_gbs": bandwidth["triad"]},
    )
    return roofline, pd.DataFrame(rows), skipped
