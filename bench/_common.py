"""What the evaluation benches share: the load average line, running one `task=evaluate` as a subprocess, and
reading the runs' metrics back from their MLflow store into one table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} logical cores)"


STORE_HELP = (
    "the MLflow store: a path (a SQLite file there) or a tracking URI (sqlite:///..., postgresql://..., http://...)"
)


def store_uri(store: str) -> str:
    """The tracking URI of a bench's store: a URI as given (``sqlite:///...``, ``postgresql://...``,
    ``http://...``), a path as a sqlite store there, its folder made."""
    if "://" in store:
        return store
    Path(store).parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(store).resolve()}"


def run_evaluation(
    label: str, overrides: Sequence[str], uri: str, experiment: str, timeout: float
) -> tuple[str, float]:
    """One `python -m dlbench task=evaluate` with ``overrides`` into ``uri``; its run name and wall seconds (a
    failure is printed with its stderr's tail)."""
    run_name = f"bench-{label}-{int(time.time())}"
    command = [
        sys.executable, "-m", "dlbench", "task=evaluate", *overrides, f"mlflow.tracking_uri={uri}",
        f"mlflow.experiment={experiment}", f"mlflow.run_name={run_name}", "quiet=true",
    ]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout)  # noqa: S603
    if result.returncode != 0:
        print(f"{label}: FAILED\n{result.stderr[-2000:]}", file=sys.stderr)
    return run_name, time.perf_counter() - start


def runs_table(uri: str, experiment: str, evaluations: Sequence[dict], columns: Sequence[str]):
    """One row per evaluation (a dict with its ``run_name`` and what identifies it), with the run's status and
    the ``columns`` metrics; ``missing`` where the run is not in the store."""
    import pandas as pd

    from dlbench.tracking.store import resolve_tracking, search_runs

    runs = search_runs(resolve_tracking(uri, experiment), "", [experiment])
    rows = []
    for evaluation in evaluations:
        row = {k: v for k, v in evaluation.items() if k != "run_name"}
        match = runs[runs["tags.mlflow.runName"] == evaluation["run_name"]] if len(runs) else runs
        if len(match):
            record = match.iloc[0]
            row["status"] = record["status"]
            row.update({c: record.get(f"metrics.{c}") for c in columns})
            row["run_id"] = record["run_id"]
        else:
            row["status"] = "missing"
        rows.append(row)
    return pd.DataFrame(rows)


def print_table(table) -> None:
    import pandas as pd

    with pd.option_context("display.width", 240, "display.max_columns", 40):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
