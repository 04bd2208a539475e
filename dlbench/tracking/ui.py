"""Links into MLflow's UI that open on what dlbench logged, and the column set its run list shows.

MLflow 3.17's UI chooses between its GenAI and "Model training" views from a switch the browser remembers,
not from the experiment's kind tag (which older 3.x versions read, and which dlbench sets as well); the links
therefore carry ``workflowType=machine_learning``. The run list's columns come from a shared view that
dlbench keeps as an experiment tag (``mlflow.sharedViewState.dlbench``), opened by ``viewStateShareKey``.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Sequence

from dlbench.tracking.store import TrackingTarget, mlflow_client, with_retry

log = logging.getLogger(__name__)

#: Where ``mlflow ui`` serves by default, for stores that are not a server
DEFAULT_UI = "http://127.0.0.1:5000"
VIEW_KEY = "dlbench"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
#: Run-list columns after the run's name and start: what identifies a run, the scalar metrics every kind of
#: run is compared by (a run without one shows "-"), and whether the machine was busy while it measured
VIEW_COLUMNS = (
    ("params", "batch_size"),
    ("params", "dtype"),
    ("params", "implementation"),
    ("tags", "dlbench.noisy"),
    ("metrics", "total_time_ms"),
    ("metrics", "time_per_sample_ms"),
    ("metrics", "gflops_per_s_mean"),
    ("metrics", "operations_ok"),
    ("metrics", "operations_failed"),
    ("metrics", "step_time_s_median"),
    ("metrics", "samples_per_s_median"),
    ("metrics", "prediction_error_pct"),
    # the error's 95% interval over an evaluation's paired rounds (dlbench.analysis.step_interval)
    ("metrics", "prediction_error_lo_pct"),
    ("metrics", "prediction_error_hi_pct"),
    ("attributes", "Dataset"),
    ("attributes", "Source"),
)
#: Widths in pixels where the UI's default (100) would cut the value or the header
VIEW_WIDTHS = {("attributes", "Run Name"): 280, ("attributes", "Dataset"): 180, ("attributes", "Source"): 260,
               ("params", "implementation"): 130, ("tags", "dlbench.noisy"): 120,
               **{("metrics", name): 150 for kind, name in VIEW_COLUMNS if kind == "metrics"}}  # fmt: skip
#: The UI's own columns that come first: selection, run name, start time (and nesting)
LEADING_COLUMNS = ("1", "attributes.`Run Name`", "runDateAndNestInfo")


def _column(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"  # the UI's canonical column key


def ui_base(target: TrackingTarget) -> str:
    """The server itself for an http(s) tracking URI; otherwise where ``mlflow ui`` listens by default."""
    return target.uri.rstrip("/") if target.uri.startswith(("http://", "https://")) else DEFAULT_UI


def experiment_link(target: TrackingTarget, experiment_id: str) -> str:
    """The experiment's runs, in the "Model training" view, with dlbench's columns."""
    query = urllib.parse.urlencode({"workflowType": "machine_learning", "viewStateShareKey": VIEW_KEY})
    return f"{ui_base(target)}/#/experiments/{experiment_id}/runs?{query}"


def run_link(target: TrackingTarget, experiment_id: str, run_id: str) -> str:
    return f"{ui_base(target)}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"


def artifact_link(target: TrackingTarget, experiment_id: str, run_id: str, path: str) -> str:
    """The run's artifact view opened on ``path`` (a plot shows at once)."""
    where = urllib.parse.quote(path, safe="/")
    return (
        f"{ui_base(target)}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{where}?workflowType=machine_learning"
    )


def compare_link(target: TrackingTarget, experiment_id: str, run_ids: Sequence[str]) -> str:
    """MLflow's compare page for ``run_ids`` (params, metrics and plots side by side)."""
    query = urllib.parse.urlencode(
        {
            "runs": json.dumps(list(run_ids)),
            "experiments": json.dumps([experiment_id]),
            "workflowType": "machine_learning",
        },
        quote_via=urllib.parse.quote,
    )
    return f"{ui_base(target)}/#/compare-runs?{query}"


def ui_command(target: TrackingTarget) -> str:
    """How to look at the runs: the server's address, or the ``mlflow ui`` command for this store."""
    if target.uri.startswith(("http://", "https://")):
        return f"open {ui_base(target)}"
    return f"mlflow ui --backend-store-uri {target.uri}"


def view_state() -> str:
    """The shared view's JSON, as the UI stores one ("Share" in the run list): which columns, in which
    order, how wide."""
    selected = [_column(kind, name) for kind, name in VIEW_COLUMNS]
    widths = {_column(kind, name): width for (kind, name), width in VIEW_WIDTHS.items()}
    return json.dumps(
        {"selectedColumns": selected, "columnOrder": [*LEADING_COLUMNS, *selected], "columnWidths": widths}
    )


def publish_view(target: TrackingTarget, experiment_id: str) -> None:
    """Keep the experiment's dlbench view current; a failure only costs the column set, never a run."""
    state = view_state()
    try:
        client = mlflow_client(target)
        experiment = with_retry(lambda: client.get_experiment(experiment_id), "read experiment")
        if experiment.tags.get(VIEW_TAG) != state:
            with_retry(lambda: client.set_experiment_tag(experiment_id, VIEW_TAG, state), "set view")
    except Exception as err:  # noqa: BLE001 - e.g. a server that forbids experiment tags to this user
        log.debug("could not store the run-list view in experiment %s: %s", experiment_id, err)
