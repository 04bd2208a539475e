"""``+benchmark=roofline``: measure this machine's ceiling and log it as a run that later sweeps look up."""

from __future__ import annotations

import pandas as pd

from dlbench.analysis.roofline import ROOFLINE_KIND, roofline_metrics
from dlbench.backends.torch.peaks import measure_roofline
from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.device import resolve_device
from dlbench.tracking.runs import open_run


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    import matplotlib.pyplot as plt

    from dlbench.analysis.plots import plot_roofline

    device = resolve_device(cfg.device)
    name = cfg.benchmark.name if cfg.benchmark else "roofline"
    params = {
        "benchmark": name,
        "device": device,
        "threads": cfg.threads,
        **{f"roofline.{k}": v for k, v in vars(cfg.roofline).items()},
    }
    with open_run(cfg, ctx, kind=ROOFLINE_KIND, benchmark=name, name=f"roofline-{device}", params=params) as run:
        roofline, table, skipped, emulated = measure_roofline(cfg, device)
        run.log_metrics(roofline_metrics(roofline))
        run.log_table(table, "roofline.csv")
        if skipped:
            run.log_text("".join(f"{dtype}: {reason}\n" for dtype, reason in skipped.items()), "skipped_dtypes.txt")
            run.set_tags({"dlbench.skipped_dtypes": ",".join(skipped)})
        if emulated:
            run.set_tags({"dlbench.emulated_dtypes": ",".join(emulated)})
        fig = plot_roofline(pd.DataFrame(columns=["intensity", "gflops_per_s"]), roofline.peak_gflops,
                            roofline.bandwidth_gbs, f"roofline {device}")  # fmt: skip
        run.log_figure(fig, "roofline.png")
        plt.close(fig)
        print(f"\n{run.run_name} (MLflow run {run.run_id})")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        for dtype, reason in emulated.items():
            print(f"{dtype}: emulated ({reason}); its peak is that of a software path, not of the hardware")
        for dtype, reason in skipped.items():
            print(f"{dtype}: not measured ({reason})")
        spent = table[table["budget_spent"]]["kernel"].tolist() if len(table) else []
        if spent:
            print(f"{', '.join(spent)}: stopped after roofline.kernel_budget_s={cfg.roofline.kernel_budget_s:g} s")
    return 0
