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

    from dlbench.analysis.compare import artifact_reader
    from dlbench.analysis.report import NOTE_TAG
    from dlbench.analysis.sweep import summarize_sweep, sweep_figures, sweep_note
    from dlbench.tracking.sweep import attach_sweep_run, child_runs
    from dlbench.tracking.ui import compare_link, experiment_link, run_link, ui_command

    run = attach_sweep_run(sweep)
    children = child_runs(sweep)
    summary = summarize_sweep(children, artifact_reader(sweep.target), swept)
    status = sweep_status(completed, [str(s) for s in summary.jobs["status"]])
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
    if completed:
        for name, figure in sweep_figures(summary):
            run.log_figure(figure, name)
            plt.close(figure)
            artifacts.append(name)
    counts = summary.jobs["status"].value_counts()
    run.log_metrics({f"jobs_{s.lower()}": float(counts.get(s, 0)) for s in (FINISHED, FAILED, KILLED)})
    title = run.data().tags.get("mlflow.runName", "sweep")
    run.set_tags({NOTE_TAG: sweep_note(title, summary, status, artifacts)})
    run.end(status)
    link = run_link(sweep.target, sweep.experiment_id, sweep.run_id)
    print(f"\nsweep {title} (MLflow run {sweep.run_id}, {status}): {link}")
    finished = [r for r, s in zip(summary.jobs["run_id"], summary.jobs["status"], strict=True) if s == FINISHED]
    if len(finished) > 1:
        print(f"its job runs side by side: {compare_link(sweep.target, sweep.experiment_id, finished)}")
    print(
        f"all runs of the experiment: {experiment_link(sweep.target, sweep.experiment_id)} ({ui_command(sweep.target)})"
    )
    return status
