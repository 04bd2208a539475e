"""The machine's ceiling: attainable GEMM GFLOP/s per dtype and memory bandwidth (copy, triad), measured
with torch and logged as a run; operator sweeps on the same system place each operation under it."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dlbench.app import AppContext
from dlbench.config import DlbenchConfig

log = logging.getLogger(__name__)

ROOFLINE_KIND = "roofline"


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


# ----------------------------------------------------------------------------------------- measuring


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


def roofline_metrics(roofline: Roofline) -> dict[str, float]:
    metrics = {f"peak_gflops_{dtype}": value for dtype, value in roofline.peak_gflops.items()}
    metrics["bandwidth_gbs"] = roofline.bandwidth_gbs
    metrics.update(roofline.extra)
    if roofline.peak_gflops:
        metrics["ridge_point_flop_per_byte"] = roofline.ridge_point()
    return metrics


def run_roofline(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """``+benchmark=roofline``: measure and log one run (tag dlbench.kind=roofline, hardware tags)."""
    from dlbench.plots import plot_roofline
    from dlbench.sweep import resolve_device, sweep_tags
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking

    device = resolve_device(cfg.device)
    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
    name = cfg.benchmark.name if cfg.benchmark else "roofline"
    params = {
        "benchmark": name,
        "device": device,
        "threads": cfg.threads,
        **{f"roofline.{k}": v for k, v in vars(cfg.roofline).items()},
    }
    run_name = cfg.mlflow.run_name or f"roofline-{device}"
    with TrackedRun(target, run_name, params, sweep_tags(ctx, ROOFLINE_KIND, name), experiment_id=experiment_id) as run:
        run.set_tags({"dlbench.run_id": run.run_id})
        if ctx.config_yaml:
            run.log_text(ctx.config_yaml, "config.yaml")
        roofline, table, skipped = measure_roofline(cfg, device)
        run.log_metrics(roofline_metrics(roofline))
        run.log_table(table, "roofline.csv")
        if skipped:
            run.log_text("".join(f"{dtype}: {reason}\n" for dtype, reason in skipped.items()), "skipped_dtypes.txt")
            run.set_tags({"dlbench.skipped_dtypes": ",".join(skipped)})
        fig = plot_roofline(pd.DataFrame(columns=["intensity", "gflops_per_s"]), roofline.peak_gflops,
                            roofline.bandwidth_gbs, f"roofline {device}")  # fmt: skip
        run.log_figure(fig, "roofline.png")
        import matplotlib.pyplot as plt

        plt.close(fig)
        print(f"\n{run_name} (MLflow run {run.run_id})")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        for dtype, reason in skipped.items():
            print(f"{dtype}: not measured ({reason})")
    return 0


# ------------------------------------------------------------------------------- lookup and sweep use


def latest_roofline(target: Any, system_id: str, experiments: list[str] | None = None) -> Roofline | None:
    """The newest finished roofline run of ``system_id`` in the experiment(s), or None."""
    from dlbench.tracking import search_runs

    quoted = system_id.replace("'", "\\'")
    runs = search_runs(
        target,
        f"tags.`dlbench.kind` = '{ROOFLINE_KIND}' and tags.`system.id` = '{quoted}' and attributes.status = 'FINISHED'",
        experiments,
        max_results=50,
    )
    if runs is None or len(runs) == 0:
        return None
    runs = runs.sort_values("start_time", ascending=False)
    return roofline_from_row(runs.iloc[0], system_id)


def roofline_from_row(row: Mapping[str, Any], system_id: str = "") -> Roofline | None:
    """A Roofline from one row of ``search_runs`` (``metrics.peak_gflops_<dtype>``, ``metrics.bandwidth_gbs``)."""
    peaks = {
        key[len("metrics.peak_gflops_") :]: float(value)
        for key, value in row.items()
        if str(key).startswith("metrics.peak_gflops_") and value == value and value is not None
    }
    bandwidth = row.get("metrics.bandwidth_gbs")
    if not peaks or bandwidth is None or not bandwidth == bandwidth or float(bandwidth) <= 0:
        return None
    return Roofline(peaks, float(bandwidth), system_id=system_id, run_id=str(row.get("run_id", "")))


def attach_roofline(run: Any, frame: pd.DataFrame, dtype: str, title: str) -> pd.DataFrame:
    """For an operator sweep's results: look up the latest roofline of this system (same experiment),
    add the roofline columns, log ``roofline.png``, the median achieved fraction and the roofline's run
    id. Without a roofline run the frame comes back unchanged (a note is logged at INFO level)."""
    from dlbench.results import add_roofline_columns
    from dlbench.system import hardware_tags

    system_id = hardware_tags().get("system.id", "")
    try:
        roofline = latest_roofline(run.target, system_id)
    except Exception as err:  # noqa: BLE001 - a missing roofline must never fail a sweep
        log.info("no roofline lookup for %s: %s", system_id, err)
        return frame
    if roofline is None:
        log.info("no roofline run for system %s; run `python -m dlbench +benchmark=roofline` once", system_id)
        return frame
    frame = add_roofline_columns(frame, roofline.peak(dtype), roofline.bandwidth_gbs)
    fractions = frame["roofline_fraction"].dropna()
    run.set_tags({"dlbench.roofline_run_id": roofline.run_id})
    if len(fractions):
        run.log_metrics({"roofline_fraction_median": float(fractions.median())})
        if fractions.max() > 1.05:
            log.warning(
                "%s: operations run at up to %.2fx the roofline of run %s; it was measured under other conditions "
                "(threads, load, dtype): measure it again with this sweep's settings",
                title,
                fractions.max(),
                roofline.run_id,
            )
    import matplotlib.pyplot as plt

    fig = plot_roofline_frame(frame, roofline, dtype, title)
    run.log_figure(fig, "roofline.png")
    plt.close(fig)
    return frame


def plot_roofline_frame(frame: pd.DataFrame, roofline: Roofline, dtype: str, title: str):
    from dlbench.plots import plot_roofline

    peaks = {dtype: roofline.peak(dtype)}
    return plot_roofline(frame, peaks, roofline.bandwidth_gbs, title)
