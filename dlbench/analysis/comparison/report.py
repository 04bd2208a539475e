"""What a comparison with a baseline logs and prints: ``changes.csv``, the forest plot (PNG, and an HTML page
with it as SVG that MLflow's artifact view shows), the count of each verdict as metrics, a one-paragraph
description, the machines' differing fields, one warning on noisy settings, and the regression gate's
verdict (exit status 1 with the table of what regressed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis.comparison.change import is_total, verdict_counts
from dlbench.analysis.comparison.forest import forest_figure, forest_html
from dlbench.analysis.comparison.sides import Judged
from dlbench.analysis.report import NOTE_TAG
from dlbench.core.change_rules import fails

FOREST_HTML = "forest.html"


def summary_paragraph(judged: Judged, baseline: str, candidate: str, threshold: float) -> str:
    """The run's description: what was compared, the verdicts, the totals, the machines' differences."""
    changes = judged.changes
    counts = verdict_counts(changes)
    ops = int((~is_total(changes["operation"])).sum())
    totals = changes[is_total(changes["operation"])]
    total_text = "; ".join(
        f"{r.operation} {r.ratio:.3f}x (95% CI {r.low:.3f}-{r.high:.3f}, {r.verdict})"
        for r in totals.itertuples(index=False)
    )
    machines = judged.machines
    if judged.machine_note:
        differ = f" {judged.machine_note}."
    elif len(machines):
        differ = f" The machines differ in {len(machines)} field(s): {', '.join(machines['field'].head(8))}."
    else:
        differ = " The machines' recorded state is the same."
    probes = [f"{p.label} {r:.3g}x" for p, r in zip(judged.pairs, judged.probe_ratios, strict=False) if r == r]
    if probes:  # the machine's speed between the sides, as the reference probe saw it
        differ += f" Reference probe B / A: {', '.join(probes[:6])}."
    moved = f", {counts['moved']} not judged: the machine moved between the sides" if counts.get("moved") else ""
    method = judged.method or (
        "Ratios are B / A of medians with 95% bootstrap intervals over the recorded samples, rounds resampled as "
        "blocks."
    )
    return (
        f"B ({candidate or 'the other runs'}) against A ({baseline}), {len(judged.pairs)} pair(s) of sweeps, "
        f"{ops} operations: {counts['slower']} slower, {counts['faster']} faster, {counts['same']} the same "
        f"within ±{threshold:.0%}, {counts['unsure']} unsure (interval too wide, or an input contended, noisy or "
        f"partial){moved}. Totals: {total_text or 'none'}.{differ} {method} Threshold {threshold:.0%} "
        "(compare.threshold); an operation is slower or faster only after Holm's correction over its pair's "
        "operations."
    )


def log_changes(run: Any, judged: Judged, settings: Any, out_dir: Path, experiment_id: str) -> int:
    """Log and print the comparison; the exit status: 1 when ``settings.fail_on`` matches a verdict."""
    import matplotlib.pyplot as plt

    from dlbench.tracking.ui import artifact_link

    changes = judged.changes
    path = out_dir / "changes.csv"
    changes.to_csv(path, index=False)
    run.log_artifact(path)
    if len(judged.machines):
        run.log_table(judged.machines, "machine_differences.csv")
    title = f"B ({_short(settings.candidate) or 'the other runs'}) / A ({_short(settings.baseline)})"
    summary = summary_paragraph(judged, settings.baseline, settings.candidate, settings.threshold)
    if len(changes):
        fig = forest_figure(changes, settings.threshold, title)
        run.log_figure(fig, "forest.png")
        plt.close(fig)
        run.log_text(forest_html(changes, settings.threshold, title, summary), FOREST_HTML)
    counts = verdict_counts(changes)
    run.log_metrics({f"changes_{k}": float(v) for k, v in counts.items()})
    run.set_tags({NOTE_TAG: summary})
    print_changes(judged, summary)
    print(f"forest plot: {artifact_link(run.target, experiment_id, run.run_id, FOREST_HTML)}")
    return gate(changes, settings.fail_on)


def _short(spec: str) -> str:
    return spec if len(spec) <= 24 else spec[:12] + "..."


def print_changes(judged: Judged, summary: str) -> None:
    with pd.option_context("display.width", 200, "display.max_rows", 80, "display.max_colwidth", 50):
        shown = judged.changes[["operation", "A", "B", "ratio", "low", "high", "verdict", "why"]].copy()
        shown["why"] = shown["why"].str.slice(0, 70)
        print("\nchanges (ms; ratio B / A with its 95% interval):")
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"\n{summary}")
        if len(judged.machines):
            print("\nthe machines differ:")
            print(judged.machines.to_string(index=False))
    if judged.noisy_settings:  # once, one line
        print("warning: noisy settings: " + "; ".join(judged.noisy_settings), file=sys.stderr)


def gate(changes: pd.DataFrame, fail_on: str) -> int:
    """1, after printing what matched, when any operation or total has the verdict ``fail_on`` names."""
    if not fail_on:
        return 0
    matched = changes[[fails(v, fail_on) for v in changes["verdict"]]]
    if matched.empty:
        print(f"gate compare.fail_on={fail_on}: passed, nothing {fail_on}")
        return 0
    print(f"\ngate compare.fail_on={fail_on}: {len(matched)} operation(s) or total(s) {fail_on}:", file=sys.stderr)
    table = matched[["operation", "A", "B", "ratio", "low", "high", "verdict", "why"]]
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"), file=sys.stderr)
    return 1
