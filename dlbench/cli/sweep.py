"""The end of a multirun: its jobs' runs read back from MLflow and summed up in the sweep's own run (a job
table, an operation x swept-value table, plots, a description), then the sweep's run ended."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: What a sweep's run ends as, from how the multirun ended and the statuses of its jobs' runs
KILLED, FAILED, FINISHED = "KILLED", "FAILED", "FINISHED"


def sweep_status(completed: bool, statuses: Sequence[str]) -> str:
    """FINISHED only when the multirun completed and every job's run finished; KILLED when one was killed
    (Ctrl-C, SIGTERM); FAILED otherwise (a job failed, or ended before opening its run)."""
    if KILLED in statuses:
        return KILLED
    if completed and statuses and all(s == FINISHED for s in statuses):
        return FINISHED
    return FAILED


def finish_sweep_run(sweep, swept: Sequence[str], completed: bool) -> str:
    """Log the summary of ``sweep`` (a ``tracking.sweep.SweepHandle``) to its run and end it; returns the
    status. Plots are left out when the sweep did not complete, so an interrupted one exits promptly."""
    import tempfile

    import matplotlib.pyplot as plt

    from dlbench.analysis.comparison.runs import artifact_reader
    from dlbench.analysis.report import NOTE_TAG
    from dlbench.analysis.sweep import summarize_sweep, sweep_figures, sweep_note
    from dlbench.tracking.sweep import attach_sweep_run, child_runs
    from dlbench.tracking.ui import artifact_link, compare_link, experiment_link, run_link, ui_command

    run = attach_sweep_run(sweep)
    children = child_runs(sweep)
    summary = summarize_sweep(children, artifact_reader(sweep.target), swept)
    job_statuses = [str(s) for s in summary.jobs["status"]] if "status" in summary.jobs else []  # none: no job ran
    status = sweep_status(completed, job_statuses)
    artifacts: list[str] = []
    tables = {"sweep/jobs.csv": summary.jobs, "sweep/operations.csv": summary.operations,
              f"sweep/median_ms_by_{summary.x}.csv": summary.by_value()}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, table in tables.items():
            if len(table):
                path = Path(tmp) / Path(name).name
                table.to_csv(path, index=False)
                run.log_artifact(path, "sweep")
                artifacts.append(name)
    plots: list[str] = []
    if completed:
        for name, figure in sweep_figures(summary):
            plots.append(name)
            run.log_figure(figure, name)
            plt.close(figure)
            artifacts.append(name)
    jobs = {f"jobs_{s.lower()}": float(job_statuses.count(s)) for s in (FINISHED, FAILED, KILLED)}
    run.log_metrics({**jobs, "jobs_noisy": float(summary.noisy_jobs)})
    title = run.data().tags.get("mlflow.runName", "sweep")
    noisy_tags = {"dlbench.noisy_jobs": str(summary.noisy_jobs), "dlbench.noisy": str(summary.noisy_jobs > 0).lower()}
    run.set_tags({NOTE_TAG: sweep_note(title, summary, status, artifacts), **noisy_tags})
    run.end(status)
    link = run_link(sweep.target, sweep.experiment_id, sweep.run_id)
    noisy = f", {summary.noisy_jobs} of {len(job_statuses)} jobs noisy" if summary.noisy_jobs else ""
    print(f"\nsweep {title} (MLflow run {sweep.run_id}, {status}{noisy}): {link}")
    if plots:  # the figure a person wants first: time against the swept value
        plot = artifact_link(sweep.target, sweep.experiment_id, sweep.run_id, plots[0])
        print(f"time against {summary.x.replace('_', ' ')}: {plot}")
    finished = [r for r, s in zip(summary.jobs.get("run_id", []), job_statuses, strict=True) if s == FINISHED]
    if len(finished) > 1:
        side = compare_link(sweep.target, sweep.experiment_id, finished)
        print(f"its job runs' parameters and metrics side by side: {side}")
    print(
        f"all runs of the experiment: {experiment_link(sweep.target, sweep.experiment_id)} ({ui_command(sweep.target)})"
    )
    return status
