"""The machine's ceiling in use: a roofline run's metrics, the latest roofline of a system looked up in the
store, and an operator sweep's results placed under it (intensity, bound, achieved fraction, plot)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from dlbench.core.roofline import Roofline, ceiling_label, fp32_math_of

log = logging.getLogger(__name__)

ROOFLINE_KIND = "roofline"


def roofline_metrics(roofline: Roofline) -> dict[str, float]:
    metrics = {f"peak_gflops_{dtype}": value for dtype, value in roofline.peak_gflops.items()}
    metrics["bandwidth_gbs"] = roofline.bandwidth_gbs
    metrics.update(roofline.extra)
    if roofline.peak_gflops:
        metrics["ridge_point_flop_per_byte"] = roofline.ridge_point()
    return metrics


# ------------------------------------------------------------------------------- lookup and sweep use


def latest_roofline(target: Any, system_id: str, experiments: list[str] | None = None) -> Roofline | None:
    """The newest finished roofline run of ``system_id`` in the experiment(s), or None."""
    from dlbench.tracking.store import search_runs

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


def attach_roofline(
    run: Any, frame: pd.DataFrame, dtype: str, title: str, fp32_math: str = "framework", device: str = "cpu"
) -> pd.DataFrame:
    """For an operator sweep's results: look up the latest roofline of this system (same experiment),
    add the roofline columns, log ``roofline.png``, the median achieved fraction and the roofline's run
    id. Each operation is scored against the ceiling of its own dtype and float32 math (:func:`fp32_math_of`:
    under ``framework`` a GPU convolution computed in TF32, a matmul in IEEE); operations whose ceiling was
    not measured get no score, and a warning names the ceiling. Without a roofline run the frame comes back
    unchanged (a note is logged at INFO level)."""
    from dlbench.analysis.results import add_roofline_columns
    from dlbench.tracking.system import hardware_tags

    system_id = hardware_tags().get("system.id", "")
    try:
        roofline = latest_roofline(run.target, system_id)
    except Exception as err:  # noqa: BLE001 - a missing roofline must never fail a sweep
        log.info("no roofline lookup for %s: %s", system_id, err)
        return frame
    if roofline is None:
        log.info("no roofline run for system %s; run `python -m dlbench +benchmark=roofline` once", system_id)
        return frame
    op_types = frame["op_type"].astype(str) if "op_type" in frame.columns else pd.Series("", index=frame.index)
    maths = op_types.map(lambda op: fp32_math_of(dtype, fp32_math, op, device))
    parts, peaks = [], {}
    for math_name, rows in frame.groupby(maths, sort=False):
        why = roofline.missing(dtype, str(math_name))
        if why:
            log.warning("%s: %d operations not scored: %s", title, len(rows), why)
            parts.append(rows)
            continue
        peak = roofline.peak(dtype, str(math_name))
        peaks[ceiling_label(dtype, str(math_name))] = peak
        parts.append(add_roofline_columns(rows, peak, roofline.bandwidth_gbs))
    frame = pd.concat(parts).loc[frame.index] if parts else frame
    run.set_tags({"dlbench.roofline_run_id": roofline.run_id})
    if not peaks:
        return frame
    fractions = frame["roofline_fraction"].dropna()
    if len(fractions):
        run.log_metrics({"roofline_fraction_median": float(fractions.median())})
        if fractions.max() > 1.05:
            log.warning(
                "%s: operations run at up to %.2fx the %s roofline of run %s; it was measured under other "
                "conditions (threads, load): measure it again with this sweep's settings",
                title,
                fractions.max(),
                "/".join(peaks),
                roofline.run_id,
            )
    import matplotlib.pyplot as plt

    fig = plot_roofline_frame(frame, roofline, peaks, title)
    run.log_figure(fig, "roofline.png")
    plt.close(fig)
    return frame


def plot_roofline_frame(frame: pd.DataFrame, roofline: Roofline, peaks: Mapping[str, float], title: str):
    from dlbench.analysis.plots import plot_roofline

    return plot_roofline(frame, peaks, roofline.bandwidth_gbs, title)
