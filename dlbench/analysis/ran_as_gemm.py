"""Each GEMM of a training step benchmarked in the orientation and transposition it ran. The ONNX graph gives a
GEMM's problem (a MatMul against a weight the exporter stored transposed has no transpose; the unfolded
backward problems theirs by rule), while the step ran ``linear(x, w)``, that is ``x @ w.t()`` on the weight as
stored, and autograd's ``mm`` on transposed views. The kernel a library picks, and so its time, depends on both:
bfloat16 without instructions for it ran ``a @ b`` in 202 ms and ``a @ w.t()`` in 33 ms at M=2048, K=256,
N=256 on the 2-core EPYC (float32: 4.1 against 3.4 ms). So every GEMM takes the operand layouts of the profiled
calls matched to it (the most time wins), read from their strides (``input_formats``: ``transposed`` for a
column-major matrix), and the orientation of its product: a call that computed the transposed problem
(C^T = B^T A^T, an ``mm`` of the other two operands) poses it so, M and N exchanged. Nothing is fitted: the
layouts are read, the times are the benchmarks'."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dlbench.analysis.call_fields import json_list
from dlbench.analysis.match import MatchResult, MatchTable
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.values import Operation, operation_name

GEMM_TYPES = frozenset({"Gemm", "MatMul"})
#: a column-major operand in the profile's ``input_formats`` (:mod:`dlbench.training.trace`)
TRANSPOSED = "transposed"
#: the match table's GEMM readers: the inputs that are the product's A and B, and whether B is its input
#: transposed (``linear(x, w)`` computes ``x @ w.t()``)
OPERANDS = {
    "gemm_mm": (0, 1, False),
    "gemm_bmm": (0, 1, False),
    "gemm_matmul": (0, 1, False),
    "gemm_addmm": (1, 2, False),
    "gemm_linear": (0, 1, True),
}


def call_product(kind: str, input_shapes: Any, input_formats: Any) -> tuple[int, int, int, int] | None:
    """(m, n, transA, transB) of a profiled GEMM call read with ``kind`` (a match-table ``shapes`` reader): its
    product as computed, A m x k and B k x n, each operand transposed where it was column-major. None for a call
    that is no GEMM product."""
    if kind not in OPERANDS:
        return None
    shapes, formats = json_list(input_shapes), json_list(input_formats)
    first, second, linear = OPERANDS[kind]
    if second >= len(shapes) or not all(isinstance(shapes[i], list) and shapes[i] for i in (first, second)):
        return None
    a, b = [int(d) for d in shapes[first]], [int(d) for d in shapes[second]]
    layout = [str(formats[i]) if i < len(formats) else "" for i in (first, second)]
    if len(a) < 2 or (not linear and len(b) < 2):
        return None
    folded = len(b) == 2 and len(a) > 2  # a batch of rows against one matrix: the rows are one operand
    m = math.prod(a[:-1]) if folded else a[-2]
    trans_a = int(layout[0] == TRANSPOSED and not folded)
    if linear:
        return m, b[0], trans_a, int(layout[1] != TRANSPOSED)
    return m, b[-1], trans_a, int(layout[1] == TRANSPOSED)


def gemm_orientations(
    operations: Sequence[Operation], matched: MatchResult, table: MatchTable
) -> dict[int, tuple[int, int, int, int]]:
    """GEMM operation id -> (M, N, transA, transB) as its profiled calls ran it: the pair of operand layouts
    and the orientation that took the most of its time."""
    gemms = {op.id: op for op in operations if op.op_type in GEMM_TYPES}
    votes: dict[int, dict[tuple[int, int, int, int], float]] = {}
    rows = matched.rows
    for index, op_id, time_us in matched.assignments:
        op = gemms.get(op_id)
        row = rows.iloc[index]
        rule = table.rules.get(str(row["name"]))
        if op is None or rule is None:
            continue
        product = call_product(rule.shapes, row["input_shapes"], row.get("input_formats", "[]"))
        oriented = _in_orientation(op, product) if product else None
        if oriented is not None:
            kinds = votes.setdefault(op_id, {})
            kinds[oriented] = kinds.get(oriented, 0.0) + max(time_us, 1e-9)
    return {op_id: max(kinds.items(), key=lambda item: item[1])[0] for op_id, kinds in votes.items()}


def _in_orientation(op: Operation, product: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    m, n, trans_a, trans_b = product
    p = op.param_dict
    if {int(p.get("M", 0)), int(p.get("N", 0))} != {m, n}:
        return None  # the call's batch folded otherwise: leave the operation as the graph poses it
    return m, n, trans_a, trans_b


def as_ran(op: Operation, orientation: tuple[int, int, int, int]) -> Operation:
    """``op`` posed as it ran: M and N of the product computed, each operand transposed as it was laid out."""
    m, n, trans_a, trans_b = orientation
    params = {**op.param_dict, "M": m, "N": n, "transA": trans_a, "transB": trans_b}
    ordered = tuple((d, params[d]) for d in DESCRIPTORS.get(op.op_type, list(params)) if d in params)
    if ordered == op.params:
        return op
    return replace(op, params=ordered, name=operation_name(op.op_type, ordered))


def describe(orientation: Mapping[int, tuple[int, int, int, int]], op_id: int) -> str:
    """``ran_as.csv``'s text for a GEMM's orientation (``""`` where no call set it)."""
    if op_id not in orientation:
        return ""
    m, n, trans_a, trans_b = orientation[op_id]
    return f"M={m} N={n} transA={trans_a} transB={trans_b}"
