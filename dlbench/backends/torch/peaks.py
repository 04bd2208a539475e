"""The machine's peaks measured with torch: GEMM GFLOP/s per dtype and memory bandwidth (copy, triad).

Each dtype's GEMM is sized by a short probe so that one call takes about ``roofline.call_s`` (at most
``roofline.gemm_size``), and every kernel stops repeating after ``roofline.kernel_budget_s``: a 4096 bfloat16
GEMM on a CPU without bfloat16 instructions takes minutes per call, and would say nothing more. Dtypes the
hardware has no instructions for run emulated; they are named, since their "peak" is a software path's.

float32 is measured in IEEE math (peak ``float32``) and, on a GPU with TF32 tensor cores (compute capability
8.0 on), once more with TF32 allowed (peak ``tf32``): the ceilings of ``fp32_math=ieee`` and ``tf32``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from dlbench.backends.timing import TimingSettings, time_repeated
from dlbench.backends.torch.fp32_math import apply_fp32_math
from dlbench.config import DlbenchConfig
from dlbench.core.cores import resolve_threads
from dlbench.core.cpu_dtypes import INSTRUCTIONS as NATIVE_CPU_FLAGS  # the one list, re-exported for the roofline
from dlbench.core.cpu_dtypes import cpu_flags
from dlbench.core.roofline import Roofline

log = logging.getLogger(__name__)

#: CUDA compute capability from which the tensor cores compute in a dtype
NATIVE_CUDA_CAPABILITY = {"bfloat16": (8, 0), "float16": (5, 3)}
#: CUDA compute capability from which float32 matmuls can run on TF32 tensor cores
TF32_CUDA_CAPABILITY = (8, 0)
PROBE_START = 256
SIZE_STEP = 64


@dataclass(frozen=True)
class GemmPeak:
    size: int
    best_gflops: float
    median_gflops: float
    reps: int
    budget_spent: bool


def _synchronizer(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _gemm(n: int, dtype: str, device: str) -> Callable[[], object]:
    import torch

    torch_dtype = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    return lambda: torch.mm(a, b, out=out)


def _seconds_per_call(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    fn()  # the first call pays for allocation and thread start-up
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def probe_gemm_size(dtype: str, device: str, call_s: float, max_size: int) -> int:
    """The GEMM size whose call takes about ``call_s``: sizes double from 256 until a call takes an eighth of
    that, and the time is extrapolated with n^3; a multiple of 64, at most ``max_size``."""
    sync = _synchronizer(device)
    n = min(PROBE_START, max_size)
    while True:
        seconds = _seconds_per_call(_gemm(n, dtype, device), sync)
        if seconds >= call_s / 8 or n >= max_size:
            break
        n = min(2 * n, max_size)
    scaled = n * (call_s / max(seconds, 1e-9)) ** (1 / 3)
    return max(min(int(scaled) // SIZE_STEP * SIZE_STEP, max_size), min(SIZE_STEP, max_size))


def _settings(min_time_s: float, min_reps: int, budget_s: float) -> TimingSettings:
    return TimingSettings(warmup=1, min_reps=min_reps, max_reps=10_000, min_time_s=min_time_s, budget_s=budget_s)


def measure_gemm_peak(n: int, dtype: str, device: str, settings: TimingSettings) -> GemmPeak:
    """GFLOP/s of an n x n x n matrix multiplication (2 n^3 FLOPs): best and median over repetitions."""
    timing = time_repeated(_gemm(n, dtype, device), settings, _synchronizer(device))
    flops = 2.0 * n**3
    stats = timing.stats
    return GemmPeak(n, flops / stats.min_ms / 1e6, flops / stats.median_ms / 1e6, stats.reps, timing.budget_spent)


def measure_bandwidth(mib: int, device: str, settings: TimingSettings) -> dict[str, float]:
    """GB/s of a copy (b = a: 2 arrays moved) and a triad (a = b + s c: 3 arrays), float32 arrays of
    ``mib`` MiB each, best over repetitions (the attainable bandwidth)."""
    import torch

    elements = mib * 2**20 // 4
    a = torch.rand(elements, device=device)
    b = torch.rand(elements, device=device)
    c = torch.rand(elements, device=device)
    sync = _synchronizer(device)
    array_bytes = 4.0 * elements
    copy_timing = time_repeated(lambda: b.copy_(a), settings, sync)
    triad_timing = time_repeated(lambda: torch.add(b, c, alpha=3.0, out=a), settings, sync)
    copy, triad = copy_timing.stats, triad_timing.stats
    return {
        "copy": 2 * array_bytes / copy.min_ms / 1e6,
        "triad": 3 * array_bytes / triad.min_ms / 1e6,
        "copy_median": 2 * array_bytes / copy.median_ms / 1e6,
        "triad_median": 3 * array_bytes / triad.median_ms / 1e6,
        "copy_reps": copy.reps,
        "triad_reps": triad.reps,
        "copy_budget_spent": copy_timing.budget_spent,
        "triad_budget_spent": triad_timing.budget_spent,
    }


def dtype_supported(dtype: str, device: str) -> str:
    """Empty when a GEMM of ``dtype`` runs on ``device``, else why not."""
    import torch

    try:
        x = torch.ones(8, 8, device=device, dtype=getattr(torch, dtype))
        torch.mm(x, x)
    except (RuntimeError, TypeError) as err:
        return str(err).splitlines()[0]
    return ""


def emulation(dtype: str, device: str) -> str:
    """Why ``dtype`` runs emulated on ``device`` (no instructions compute in it), or empty."""
    if dtype == "float32":
        return ""
    if device == "cuda":
        import torch

        needed = NATIVE_CUDA_CAPABILITY.get(dtype)
        capability = torch.cuda.get_device_capability()
        if needed and capability < needed:
            return f"compute capability {capability[0]}.{capability[1]} has no {dtype} arithmetic"
        return ""
    flags = cpu_flags()
    wanted = NATIVE_CPU_FLAGS.get(dtype, ())
    if flags is None or not wanted or flags & set(wanted):
        return ""
    return f"this CPU has none of {', '.join(wanted)}; {dtype} is converted and computed in software"


def ceilings(dtypes: list[str], device: str) -> list[tuple[str, str, str]]:
    """(ceiling, dtype, fp32_math) to measure: float32 in IEEE math, and in TF32 on GPUs with TF32 tensor cores."""
    out = []
    for dtype in dtypes:
        if dtype != "float32":
            out.append((dtype, dtype, ""))
            continue
        out.append(("float32", "float32", "ieee"))
        if device == "cuda":
            import torch

            if torch.cuda.get_device_capability() >= TF32_CUDA_CAPABILITY:
                out.append(("tf32", "float32", "tf32"))
    return out


def measure_roofline(cfg: DlbenchConfig, device: str) -> tuple[Roofline, pd.DataFrame, dict[str, str], dict[str, str]]:
    """Measure the peaks configured in ``cfg.roofline``; returns them, a table, the dtypes skipped and the
    dtypes emulated (each with the reason)."""
    import torch

    torch.set_num_threads(resolve_threads(cfg.threads))
    settings = cfg.roofline
    timing = _settings(settings.min_time_s, settings.min_reps, settings.kernel_budget_s)
    rows = []
    peaks: dict[str, float] = {}
    skipped: dict[str, str] = {}
    emulated: dict[str, str] = {}
    switches = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        for ceiling, dtype, fp32_math in ceilings(list(settings.dtypes), device):
            reason = dtype_supported(dtype, device)
            if reason:
                skipped[ceiling] = reason
                log.warning("roofline: %s GEMM does not run on %s: %s", dtype, device, reason)
                continue
            why = emulation(dtype, device)
            if why:
                emulated[ceiling] = why
            apply_fp32_math(fp32_math or "ieee")  # float32 in IEEE unless this is the TF32 ceiling
            size = probe_gemm_size(dtype, device, settings.call_s, settings.gemm_size)
            result = measure_gemm_peak(size, dtype, device, timing)
            peaks[ceiling] = result.best_gflops
            rows.append(
                {"kernel": f"gemm_{ceiling}", "size": size, "unit": "GFLOP/s", "best": result.best_gflops,
                 "median": result.median_gflops, "reps": result.reps, "budget_spent": result.budget_spent,
                 "emulated": bool(why)}
            )  # fmt: skip
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = switches
    bandwidth = measure_bandwidth(settings.stream_mib, device, timing)
    for kernel in ("copy", "triad"):
        rows.append(
            {"kernel": kernel, "size": settings.stream_mib, "unit": "GB/s", "best": bandwidth[kernel],
             "median": bandwidth[f"{kernel}_median"], "reps": bandwidth[f"{kernel}_reps"],
             "budget_spent": bandwidth[f"{kernel}_budget_spent"],
             "emulated": False}
        )  # fmt: skip
    roofline = Roofline(
        peak_gflops=peaks,
        bandwidth_gbs=max(bandwidth["copy"], bandwidth["triad"]),
        extra={"bandwidth_copy_gbs": bandwidth["copy"], "bandwidth_triad_gbs": bandwidth["triad"]},
    )
    return roofline, pd.DataFrame(rows), skipped, emulated
