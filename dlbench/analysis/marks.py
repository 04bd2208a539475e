"""Which numbers every view marks: an operation whose status is not ``ok`` (any status, known or not), and a
run measured while the machine was busy (tag ``dlbench.noisy``). Tables say why; plots draw them hollow."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

OK = "ok"
#: What each known status means for the number beside it; any other status is marked as well
STATUS_MEANINGS = {
    "unstable": "did not converge: the median's 95% interval stayed wider than measure.target_rel_ci",
    "contended": "its threads waited for cores other work held while it was timed: the time is an upper bound "
    "(totals count it apart)",
    "unsupported": "cannot be posed by this implementation (see the error column)",
    "failed": "no measurement (see the error column)",
}
#: The legend entry of a hollow marker
HOLLOW_MEANING = "hollow: not ok (an operation's status other than ok, or a busy machine)"


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


def mark_reasons(operations: pd.DataFrame) -> pd.Series:
    """Per operation row, why its number is not clean: its status when not ok, "noisy run" when its run was
    measured on a busy machine; empty when clean."""
    status = operations["status"].astype(str) if "status" in operations else pd.Series("ok", index=operations.index)
    noisy = flags(operations.get("noisy"), operations.index)
    reasons = [", ".join(([s] if is_marked_status(s) else []) + (["noisy run"] if n else []))
               for s, n in zip(status, noisy, strict=True)]  # fmt: skip
    return pd.Series(reasons, index=operations.index, dtype=object)


def marked_values(operations: pd.DataFrame, index: Sequence[str], label) -> pd.DataFrame:
    """Per ``index`` group, the swept values (``label(row)``) whose number is marked and why, e.g.
    ``bs4: contended; bs16: noisy run`` (column ``marked``; empty when every number is clean)."""
    reasons = mark_reasons(operations)
    frame = operations.assign(why_marked=reasons)[lambda f: f["why_marked"] != ""]
    if frame.empty:
        return pd.DataFrame(columns=[*index, "marked"])
    frame = frame.assign(cell_marked=[f"{label(r)}: {r.why_marked}" for r in frame.itertuples(index=False)])
    cells = frame.groupby(list(index), sort=False, dropna=False)["cell_marked"].agg("; ".join)
    return cells.rename("marked").reset_index()


def run_marks(runs: pd.DataFrame) -> pd.Series:
    """Per run: measured on a busy machine, or with operations whose status was not ok."""
    return flags(runs.get("noisy"), runs.index) | (not_ok_counts(runs) > 0)
