"""Profiled PyTorch operators <-> extracted ONNX operations: an explicit table (``conf/match/default.yaml``)
says which ONNX op_type and pass each profiled operator runs; each profiled call is assigned by shape.

How double counting is avoided: torch.profiler reports nested calls (``aten::conv2d`` >
``aten::convolution`` > ``aten::_convolution`` > ``aten::mkldnn_convolution``), each with a *total* time
that includes its children and a *self* time that excludes them. Matching uses self times only: self
times of different events never overlap, so their sum over any set of events is time spent exactly once.
The table lists every level of a family (the wrappers and the kernel), so all of a convolution's levels
are attributed to the same Conv operation; calls nested in a family but not listed (``aten::empty``,
``aten::copy_``) are counted as framework time. A name with a rule that is also listed as framework is
framework time when no operation fits its shapes (``aten::fill_`` zeroing the logits' gradient belongs to
the loss, elsewhere it is bookkeeping). The profiled step then splits without overlap into time assigned
to operations, framework time, unmatched operator time and time outside any operator.

A backward operator whose op_type the model has but whose pass the training step does not (no rule derives
it, or a rule declares it not predicted) is ``not_predicted``: named with its time, never counted under the
forward operation.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench import CONF_DIR
from dlbench.analysis.call_fields import (  # noqa: F401 - MatchError, _nchw_fields: their old import place
    SHAPE_READERS,
    TYPED_READERS,
    MatchError,
    _nchw_fields,
    json_list,
    operation_fields,
)
from dlbench.core.tables import load_mapping
from dlbench.core.values import Operation

DEFAULT_TABLE = CONF_DIR / "match" / "default.yaml"


#: A matched row's key: a profiled call kind (``dlbench.training.profile.PROFILE_KEY``; matching reads only
#: the shapes, so a call fits its operation in whatever dtype and layout it ran).
MATCH_KEY = ("name", "input_shapes", "input_types", "memory_format", "input_formats", "within")


# ------------------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class OperatorRule:
    """A profiled operator: the ONNX op_types and passes it can run, and how its shapes read."""

    name: str
    op_types: tuple[str, ...]
    passes: tuple[str, ...]
    shapes: str

    def fields(
        self, op_type: str, shapes: Sequence[Any], types: Sequence[str] = (), formats: Sequence[str] = ()
    ) -> dict[str, Any]:
        if self.shapes in TYPED_READERS:
            return TYPED_READERS[self.shapes](op_type, shapes, types, formats)
        return SHAPE_READERS[self.shapes](op_type, shapes)

    def accepts(self, op_type: str, pass_name: str) -> bool:
        """Whether an operation of ``op_type`` in pass ``pass_name`` can be this call: a pass is listed bare
        (for every op_type of the rule) or as ``OpType/pass`` (for that op_type only)."""
        return pass_name in self.passes or f"{op_type}/{pass_name}" in self.passes

    def passes_of(self, op_type: str) -> list[str]:
        return [p.rpartition("/")[2] for p in self.passes if "/" not in p or p.startswith(f"{op_type}/")]


@dataclass(frozen=True)
class MatchTable:
    rules: Mapping[str, OperatorRule]
    framework: tuple[str, ...] = ()
    training: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def is_framework(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.framework)


def parse_table(data: Mapping[str, Any], source: str = "match table") -> MatchTable:
    """Validate a table (``operators``, ``framework``, ``training``) naming the entry that is wrong."""
    if not isinstance(data, Mapping) or not isinstance(data.get("operators"), Mapping):
        raise MatchError(f"{source}: expected a top-level 'operators' map of profiled name -> rule")
    rules: dict[str, OperatorRule] = {}
    for name, entry in data["operators"].items():
        where = f"{source}: operators.{name}"
        if not isinstance(entry, Mapping):
            raise MatchError(f"{where}: a rule is a map with op_type, passes and shapes")
        unknown = set(entry) - {"op_type", "passes", "shapes"}
        if unknown:
            raise MatchError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        op_types = entry.get("op_type")
        op_types = [op_types] if isinstance(op_types, str) else list(op_types or [])
        if not op_types:
            raise MatchError(f"{where}: op_type is required")
        passes = entry.get("passes") or ["forward"]
        if isinstance(passes, str):
            passes = [passes]
        shapes = str(entry.get("shapes", "first"))
        if shapes not in SHAPE_READERS and shapes not in TYPED_READERS:
            raise MatchError(f"{where}: shapes={shapes!r}; use one of {', '.join([*SHAPE_READERS, *TYPED_READERS])}")
        rules[str(name)] = OperatorRule(str(name), tuple(map(str, op_types)), tuple(map(str, passes)), shapes)
    framework = data.get("framework") or []
    if isinstance(framework, str) or not isinstance(framework, Sequence):
        raise MatchError(f"{source}: framework must be a list of names or prefixes")
    training = data.get("training") or {}
    if not isinstance(training, Mapping):
        raise MatchError(f"{source}: training must be a map")
    return MatchTable(rules, tuple(str(f) for f in framework), dict(training), source)


def load_table(source: str | Path | Mapping[str, Any] | None = None) -> MatchTable:
    """The table from a YAML file, a mapping (e.g. Hydra's ``cfg.match``), or the shipped default."""
    data, origin = load_mapping(source, DEFAULT_TABLE, MatchError, "match table")
    return parse_table(data, origin)


# ---------------------------------------------------------------------------------------- the profile


def profile_per_step(profile_dir: str | Path, time_column: str = "self_cpu_us") -> pd.DataFrame:
    """Per (name, input_shapes): calls and ``time_column`` per step, the median over the profiled batches
    (a key missing from a batch counts 0 there), from the ``batch_<i>_ops.csv`` files."""
    from dlbench.training.profile import read_profile

    paths = sorted(Path(profile_dir).glob("batch_*_ops.csv"))
    if not paths:
        raise MatchError(f"{profile_dir}: no batch_*_ops.csv profile files")
    frames = [read_profile(p) for p in paths]
    for path, frame in zip(paths, frames, strict=True):
        if time_column not in frame.columns:
            raise MatchError(f"{path}: no column {time_column!r}")
    return profile_from_batches(pd.concat(frames, ignore_index=True), time_column)


def profile_from_batches(rows: pd.DataFrame, time_column: str = "self_cpu_us") -> pd.DataFrame:
    """:func:`profile_per_step` on a frame of per-batch rows (columns batch, name, input_shapes, calls, the time
    column; input_types and memory_format where recorded): one row per profiled call kind
    (:data:`~dlbench.training.profile.PROFILE_KEY`), so a call that ran in two dtypes is two rows."""
    from dlbench.training.profile import PROFILE_KEY, with_profile_key

    rows = with_profile_key(rows)
    batches = sorted(rows["batch"].unique())
    keyed = rows.groupby([*PROFILE_KEY, "batch"], sort=False)[["calls", time_column]].sum()
    out = []
    for key, group in keyed.groupby(level=list(range(len(PROFILE_KEY))), sort=False):
        times = group[time_column].tolist() + [0.0] * (len(batches) - len(group))
        calls = group["calls"].tolist() + [0] * (len(batches) - len(group))
        out.append(
            {
                **dict(zip(PROFILE_KEY, key, strict=True)),
                "calls": float(pd.Series(calls).median()),
                "time_us": float(pd.Series(times).median()),
            }
        )
    return pd.DataFrame(out, columns=[*PROFILE_KEY, "calls", "time_us"])


# ------------------------------------------------------------------------------------------- matching


@dataclass(frozen=True)
class MatchResult:
    """``rows``: every profiled (name, shapes) with its status (matched, framework, not_predicted,
    unmatched), category and reason; ``assigned_us``: operation id -> profiled time per step assigned to it;
    ``assignments``: (row index, operation id, time per step) of every matched row's share."""

    rows: pd.DataFrame
    assigned_us: Mapping[int, float]
    assignments: tuple[tuple[int, int, float], ...] = ()

    def total_us(self, status: str | None = None) -> float:
        frame = self.rows if status is None else self.rows[self.rows["status"] == status]
        return float(frame["time_us"].sum())

    def unmatched(self) -> pd.DataFrame:
        """Unmatched operators by name: time per step, calls and the reason of the costliest shape."""
        rows = self.rows[self.rows["status"] == "unmatched"]
        if rows.empty:
            return pd.DataFrame(columns=["name", "time_us", "calls", "shapes", "reason"])
        grouped = rows.sort_values("time_us", ascending=False).groupby("name", sort=False)
        return (
            grouped.agg(
                time_us=("time_us", "sum"),
                calls=("calls", "sum"),
                shapes=("input_shapes", "count"),
                reason=("reason", "first"),
            )
            .reset_index()
            .sort_values("time_us", ascending=False, ignore_index=True)
        )


def _fits(fields: Mapping[str, Any], candidate: Mapping[str, Any]) -> bool:
    return all(k in candidate and candidate[k] == v for k, v in fields.items())


def match_profile(
    profile: pd.DataFrame,
    operations: Sequence[Operation],
    passes: Mapping[int, str],
    table: MatchTable,
    weights: Mapping[int, float] | None = None,
) -> MatchResult:
    """Assign each profiled row's time to the operations it ran.

    ``profile``: :func:`profile_per_step` output; ``passes``: operation id -> pass name (``forward`` when
    absent). A row whose rule fits several operations (the same GEMM size in several layers, both passes
    of a convolution backward) is split between them in proportion to ``weights`` (e.g. benchmark time x
    occurrences) when every candidate has one, else to their occurrences.
    """
    from dlbench.training.profile import RAN_AS_EMPTY

    by_type: dict[str, list[tuple[Operation, dict[str, Any]]]] = {}
    for op in operations:
        if op.count > 0:
            by_type.setdefault(op.op_type, []).append((op, operation_fields(op)))
    assigned: dict[int, float] = {}
    assignments: list[tuple[int, int, float]] = []
    records = []
    for row in profile.itertuples(index=False):
        name, time_us = str(row.name), float(row.time_us)
        ran_as = {column: getattr(row, column, empty) for column, empty in RAN_AS_EMPTY.items()}
        record = {"name": name, "input_shapes": row.input_shapes, **ran_as, "calls": row.calls, "time_us": time_us}
        rule = table.rules.get(name)
        if rule is None:
            framework = table.is_framework(name)
            status = "framework" if framework else "unmatched"
            reason = "" if framework else "no rule in the match table"
            records.append({**record, "status": status, "category": status, "operations": "", "reason": reason})
            continue
        candidates, problems = _candidates(rule, row.input_shapes, by_type, passes, ran_as["input_types"],
                                           ran_as["input_formats"])  # fmt: skip
        if not candidates:
            records.append({**record, **_unassigned(name, rule, table, by_type, passes, problems)})
            continue
        for op, fraction in _shares(candidates, weights).items():
            assigned[op] = assigned.get(op, 0.0) + time_us * fraction
            assignments.append((len(records), op, time_us * fraction))
        category = f"{candidates[0].op_type}/{passes.get(candidates[0].id, 'forward')}"
        operations_text = ";".join(str(op.id) for op in candidates)
        records.append({**record, "status": "matched", "category": category, "operations": operations_text,
                        "reason": ""})  # fmt: skip
    rows = pd.DataFrame(records, columns=[*MATCH_KEY, "calls", "time_us", "status", "category", "operations", "reason"])
    return MatchResult(rows=rows, assigned_us=assigned, assignments=tuple(assignments))


def _candidates(
    rule: OperatorRule,
    input_shapes: Any,
    by_type: Mapping[str, list],
    passes: Mapping[int, str],
    input_types: Any = (),
    input_formats: Any = (),
) -> tuple[list[Operation], list[str]]:
    """The operations a profiled call's rule fits (its op types, passes and shapes), and why others did not."""
    shapes, types, formats = json_list(input_shapes), json_list(input_types), json_list(input_formats)
    candidates: list[Operation] = []
    problems = []
    for op_type in rule.op_types:
        try:
            fields = rule.fields(op_type, shapes, types, formats)
        except (MatchError, IndexError, TypeError, ValueError) as err:
            problems.append(f"{op_type}: shapes {input_shapes} do not read as {rule.shapes}: {err}")
            continue
        for op, op_fields in by_type.get(op_type, []):
            if rule.accepts(op_type, passes.get(op.id, "forward")) and _fits(fields, op_fields):
                candidates.append(op)
        if not candidates:
            shown = ", ".join(f"{k}={v}" for k, v in fields.items()) or "any shape"
            problems.append(f"no {op_type} operation ({'/'.join(rule.passes_of(op_type))}) with {shown}")
    return candidates, problems


def _unassigned(
    name: str, rule: OperatorRule, table: MatchTable, by_type: Mapping[str, list], passes: Mapping[int, str],
    problems: list[str],
) -> dict[str, str]:  # fmt: skip
    """Status, category and reason of a call with a rule that fits no operation: framework (a rule for some
    shapes only), not predicted (the step lacks the pass), or unmatched (with why)."""
    if table.is_framework(name):  # a rule for some shapes (aten::fill_ of the logits), framework otherwise
        return {"status": "framework", "category": "framework", "operations": "", "reason": ""}
    missing = _missing_passes(rule, by_type, passes)
    if missing:  # the model has the operator, the training step not the pass that runs this call
        reason = (
            f"the training step has no {missing} operation (no unfold rule derives it, or it is declared not predicted)"
        )
        return {"status": "not_predicted", "category": missing, "operations": "", "reason": reason}
    return {"status": "unmatched", "category": "unmatched", "operations": "", "reason": "; ".join(problems)}


def _missing_passes(rule: OperatorRule, by_type: Mapping[str, list], passes: Mapping[int, str]) -> str:
    """``OpType/pass`` of a backward call whose op_type the model has while the step has no operation of any
    pass the call can be ("" when the step has one, or the rule names a forward pass: then a shape differs)."""
    present = [t for t in rule.op_types if t in by_type]
    if not present or any("forward" in rule.passes_of(t) for t in present):
        return ""
    for op_type in present:
        if any(rule.accepts(op_type, passes.get(op.id, "forward")) for op, _ in by_type[op_type]):
            return ""
    return f"{present[0]}/{'|'.join(rule.passes_of(present[0]))}"


def _shares(candidates: Sequence[Operation], weights: Mapping[int, float] | None) -> dict[int, float]:
    values = [weights.get(op.id, 0.0) if weights else 0.0 for op in candidates]
    if not all(v > 0 and math.isfinite(v) for v in values):
        values = [float(op.count) for op in candidates]
    total = sum(values) or 1.0
    return {op.id: v / total for op, v in zip(candidates, values, strict=True)}
