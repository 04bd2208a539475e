"""Is B faster than A: the comparison in one folder.

- ``runs``: runs side by side (found through MLflow's search API) as tables across systems, implementations and
  batch sizes (:func:`compare_runs`);
- ``sides``: which runs are A and B, how they pair, the samples each recorded (:func:`judge`);
- ``change``: a change with its interval and verdict, pure functions of samples (:func:`compare_samples`);
- ``paired``: B / A over paired rounds, A and B timed in the same rounds (:func:`paired_ratio`; also the
  prediction error's interval, :mod:`dlbench.tasks.evaluate`);
- ``forest``: the forest plot, PNG and HTML; ``report``: what a comparison logs and prints, and the gate
  (:func:`log_changes`, :func:`gate`)."""

from dlbench.analysis.comparison.change import ChangeSettings, compare_samples, verdict, verdict_counts
from dlbench.analysis.comparison.paired import PairedRatio, paired_ratio
from dlbench.analysis.comparison.report import gate, log_changes
from dlbench.analysis.comparison.runs import Comparison, compare_runs
from dlbench.analysis.comparison.sides import Judged, judge

__all__ = [
    "ChangeSettings",
    "Comparison",
    "Judged",
    "PairedRatio",
    "compare_runs",
    "compare_samples",
    "gate",
    "judge",
    "log_changes",
    "paired_ratio",
    "verdict",
    "verdict_counts",
]
