"""Each operation of a training step in the dtype and memory format it ran: the ONNX graph gives the shapes,
the profile says how each node ran. Every operation takes the dtype and layout of the profiled calls matched
to it (the most time wins where they differ), so autocast's lower-precision ops come out in bfloat16 or
float16, its float32 ops (the losses; on CUDA softmax and layer norm too) in float32, and the backward in
the dtypes autograd ran. An operation no call matched takes autocast's rule for its op type
(:mod:`dlbench.core.autocast`) when the script ran under autocast, else the sweep's dtype. Nothing is fitted:
the dtypes are read, the times are the benchmarks'. The casts autocast inserted and GradScaler's work join the
step as operations of their own (:mod:`dlbench.analysis.casts`).

An operation in the sweep's own dtype and a contiguous layout keeps both columns empty (the sweep's default),
so a float32 step's operations are the same problems as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from dlbench.analysis.call_fields import json_list
from dlbench.analysis.casts import amp_notes, amp_operations, layout_notes, layout_operations
from dlbench.analysis.match import MatchResult, MatchTable, match_profile
from dlbench.analysis.ran_as_gemm import as_ran, describe, gemm_orientations
from dlbench.core.autocast import autocast_dtype
from dlbench.core.costs import operation_cost
from dlbench.core.dtypes import DTYPE_BYTES, FLOAT_TYPES
from dlbench.core.values import Operation
from dlbench.onnx.step import TrainingStep

#: Columns of ``ran_as.csv``: per operation, what it is benchmarked in and where that came from.
RAN_AS_COLUMNS = ("id", "op_type", "pass", "dtype", "memory_format", "source", "profiled_us", "gemm")


def call_dtype(input_shapes: Any, input_types: Any) -> str:
    """The dtype a profiled call computed in: its first floating-point input that is not a 0-dim tensor (a
    scalar such as a loss's incoming gradient does not set it), else its first floating-point input; ``""``
    when none is recorded."""
    shapes, types = json_list(input_shapes), json_list(input_types)
    floats = [(i, t) for i, t in enumerate(types) if t in FLOAT_TYPES]
    for i, dtype in floats:
        if i < len(shapes) and isinstance(shapes[i], list) and shapes[i]:
            return dtype
    return floats[0][1] if floats else ""


@dataclass(frozen=True)
class RanAs:
    """The step's operations with their ``dtype`` and ``memory_format`` set where they ran otherwise than the
    sweep's default; ``table``: one row per operation (:data:`RAN_AS_COLUMNS`); ``notes``: what the summary
    says (a dtype this machine has no instructions for)."""

    operations: tuple[Operation, ...]
    table: pd.DataFrame
    notes: tuple[str, ...]


def operations_as_ran(
    operations: Sequence[Operation],
    passes: Mapping[int, str],
    profile: pd.DataFrame,
    table: MatchTable,
    *,
    amp: str = "none",
    sweep_dtype: str = "float32",
    device: str = "cpu",
) -> RanAs:
    """Decide each operation's dtype and memory format from the profile (:func:`ran_in`), with autocast's
    rule for what no profiled call ran; bytes moved follow each operation's dtype."""
    matched = match_profile(profile, operations, passes, table)
    seen = ran_in(operations, passes, profile, table, amp=amp, device=device, matched=matched)
    orientations = gemm_orientations(operations, matched, table)
    out, rows = [], []
    for op in operations:
        dtype, layout, time_us = seen.get(op.id, ("", "", 0.0))
        source = "profile" if dtype or layout else ""
        if op.dtype:  # made from the profile with its dtype (a cast: the dtype it converts from)
            dtype, source = op.dtype, "profile"
        if not dtype and amp != "none":
            dtype = autocast_dtype(op.op_type, amp, device) or ""
            source = "autocast" if dtype else source
        dtype = dtype or sweep_dtype
        layout = op.memory_format if op.dtype else layout  # a cast or conversion made from the profile keeps its own
        rows.append((op.id, op.op_type, passes.get(op.id, "forward"), dtype, layout or "contiguous",
                     source or "sweep", round(time_us, 3), describe(orientations, op.id)))  # fmt: skip
        if op.dtype:
            out.append(op)
            continue
        ran = _as_ran(op, "" if dtype == sweep_dtype else dtype, "" if layout == "contiguous" else layout, sweep_dtype)
        out.append(as_ran(ran, orientations[op.id]) if op.id in orientations else ran)
    frame = pd.DataFrame(rows, columns=list(RAN_AS_COLUMNS))
    return RanAs(tuple(out), frame, tuple(emulation_notes(frame, sweep_dtype, device)))


def step_as_ran(
    step: TrainingStep, profile: pd.DataFrame, table: MatchTable, facts: Mapping[str, Any], sweep_dtype: str,
    device: str,
) -> tuple[TrainingStep, pd.DataFrame]:  # fmt: skip
    """An evaluation's training step with each operation in the dtype and memory format it ran (the script's
    run facts say whether it ran under autocast), its notes extended; and the ``ran_as.csv`` table."""
    from dlbench.training.facts import effective_params

    amp = str(effective_params(dict(facts)).get("amp", "none"))
    first_id = max((op.id for op in step.operations), default=-1) + 1
    optimizers = facts.get("optimizers") if isinstance(facts.get("optimizers"), list) else None
    amp_added = amp_operations(profile, optimizers, first_id)  # the casts and GradScaler's work, as they ran
    converted = layout_operations(profile, first_id + len(amp_added), table.rules)  # copies between formats
    added = [*amp_added, *converted]
    operations = (*step.operations, *(op for op, _ in added))
    passes = {**step.passes, **{op.id: pass_name for op, pass_name in added}}
    ran = operations_as_ran(operations, passes, profile, table, amp=amp, sweep_dtype=sweep_dtype, device=device)
    notes = (*step.notes, *ran.notes, *amp_notes(amp_added), *layout_notes(converted))
    return replace(step, operations=ran.operations, passes=passes, notes=notes), ran.table


def ran_in(
    operations: Sequence[Operation],
    passes: Mapping[int, str],
    profile: pd.DataFrame,
    table: MatchTable,
    *,
    amp: str = "none",
    device: str = "cpu",
    matched: MatchResult | None = None,
) -> dict[int, tuple[str, str, float]]:
    """Operation id -> (dtype, memory format, profiled time per step) of the calls matched to it: the pair
    that took the most of its time. The match reads shapes (a cast's dtypes too), so every call finds its
    operation whatever it ran in. Under autocast an op on its lists is recorded twice, once as called (the
    caller's dtype) and once re-dispatched after the cast: where both are there, only the call in autocast's
    dtype computed (:func:`_autocast_wrappers`), whatever their times."""
    matched = matched or match_profile(profile, operations, passes, table)
    calls: dict[int, list[tuple[str, tuple[str, str], float]]] = {}
    rows = matched.rows
    for index, op_id, time_us in matched.assignments:
        row = rows.iloc[index]
        key = (call_dtype(row["input_shapes"], row["input_types"]), str(row["memory_format"] or ""))
        if key != ("", ""):
            calls.setdefault(op_id, []).append((str(row["name"]), key, max(time_us, 1e-9)))
    out = {}
    for op_id, op_calls in calls.items():
        wrappers = _autocast_wrappers(op_calls, amp, device)
        by_kind: dict[tuple[str, str], float] = {}
        for i, (_, key, time_us) in enumerate(op_calls):
            if i not in wrappers:
                by_kind[key] = by_kind.get(key, 0.0) + time_us
        (dtype, layout), _ = max(by_kind.items(), key=lambda item: item[1])
        out[op_id] = (dtype, layout, sum(time_us for _, _, time_us in op_calls))
    return out


def _autocast_wrappers(calls: Sequence[tuple[str, tuple[str, str], float]], amp: str, device: str) -> set[int]:
    """Indices of the calls that are autocast's own dispatch of an op on its lists: a call named as another of
    the same operation's calls, in a dtype other than the one autocast gives that name, where the other is in
    it. Without autocast, or with the op recorded in one dtype only, none is."""
    if amp == "none":
        return set()
    names = {(name, key[0]) for name, key, _ in calls}
    out = set()
    for i, (name, (dtype, _), _) in enumerate(calls):
        target = autocast_dtype(name, amp, device)
        if target and dtype != target and (name, target) in names:
            out.add(i)
    return out


def _as_ran(op: Operation, dtype: str, layout: str, sweep_dtype: str) -> Operation:
    if not dtype and not layout:
        return op
    changed = replace(op, dtype=dtype, memory_format=layout)
    if dtype and DTYPE_BYTES.get(dtype) != DTYPE_BYTES.get(sweep_dtype):
        flops, moved = operation_cost(op.op_type, op.param_dict, DTYPE_BYTES.get(dtype, 4))
        changed = replace(changed, flops=flops or op.flops, bytes_moved=moved or op.bytes_moved)
    return changed


#: How a note on a dtype that ran without instructions for it starts (the evaluation's summary prints it).
EMULATED = "emulated dtype: "


def emulation_notes(table: pd.DataFrame, sweep_dtype: str, device: str) -> list[str]:
    """One line per dtype that ran on a machine without instructions for it: still benchmarked, as it ran."""
    from dlbench.backends.torch.peaks import emulation

    notes = []
    for dtype, count in table.loc[table["dtype"] != sweep_dtype, "dtype"].value_counts().items():
        try:
            why = emulation(str(dtype), device)
        except (RuntimeError, AssertionError):  # no GPU to ask (a recorded CUDA step evaluated offline)
            why = ""
        if why:
            notes.append(f"{EMULATED}{count} operation(s) ran in {dtype} and are benchmarked in it, as they ran: {why}")
    return notes
