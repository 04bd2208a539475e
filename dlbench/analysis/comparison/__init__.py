"""Is B faster than A: the comparison's pieces in one folder. ``paired``: B / A over paired rounds, with its
interval (also the prediction error's interval, :mod:`dlbench.tasks.evaluate`)."""

from dlbench.analysis.comparison.paired import PairedRatio, paired_ratio

__all__ = ["PairedRatio", "paired_ratio"]
