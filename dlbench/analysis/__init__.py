"""Measurements -> insight: results tables, matching, prediction, roofline, comparisons, plots."""
