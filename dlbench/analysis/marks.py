"""Which numbers every view marks: an operation whose status is not ``ok`` (any status, known or not), and a
run measured while the machine was busy (tag ``dlbench.noisy``). Tables say why; plots draw them hollow."""

from __future__ import annotations

import math

import pandas as pd

OK = "ok"
#: What each known status means for the number beside it; any other status is marked as well
STATUS_MEANINGS = {
    "unstable": "did not converge: the median's 95% interval stayed wider than measure.target_rel_ci",
    "contended": "its threads waited for cores other work held while it was timed: the time is too long",
    "unsupported": "cannot be posed by this implementation (see the error column)",
    "failed": "no measurement (see the error column)",
}
#: The legend entry of a hollow marker
HOLLOW_MEANING = "hollow: not ok (an operation's status, a busy machine or a partial total)"


def status_meaning(status: str) -> str:
    return STATUS_MEANINGS.get(status, f"status {status!r}: not a clean measurement")


def is_marked_status(status: object) -> bool:
    """Any status other than ``ok`` (an unknown or missing one too)."""
    return str(status) != OK


def is_true(value: object) -> bool:
    """A tag or column read as a flag: ``true``, True, 1."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


def flags(column: pd.Series | None, index: pd.Index) -> pd.Series:
    """``column`` as booleans (missing: False) aligned to ``index``."""
    if column is None:
        return pd.Series(False, index=index)
    return column.map(is_true).astype(bool)


def not_ok_counts(runs: pd.DataFrame) -> pd.Series:
    """Per run, how many operations had a status other than ok (its ``operations_<status>`` metrics)."""
    columns = [c for c in runs.columns if c.startswith("operations_") and c[len("operations_") :] in STATUS_MEANINGS]
    if not columns:
        return pd.Series(0.0, index=runs.index)
    return runs[columns].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)


def status_notes(statuses: pd.Series, names: pd.Series) -> list[str]:
    """One line per status other than ok: how many operations, why, and which."""
    lines = []
    for status in dict.fromkeys(s for s in statuses.astype(str) if is_marked_status(s)):
        chosen = names[statuses.astype(str) == status].astype(str).tolist()
        lines.append(f"{len(chosen)} operation(s) {status}, {status_meaning(status)}: {', '.join(chosen)}")
    return lines
