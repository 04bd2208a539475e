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

from dlbench.analysis.call_fields import GEMM_TYPES, json_list
from dlbench.analysis.match import MatchResult, MatchTable
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.values import Operation, operation_name
from dlbench.training.trace import TRANSPOSED

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


#: the readers of the calls that compute a product (``linear`` and ``matmul`` wrap one of these, recorded too)
KERNEL_READERS = frozenset({"gemm_mm", "gemm_addmm", "gemm_bmm"})


def gemm_orientations(
    operations: Sequence[Operation], matched: MatchResult, table: MatchTable
) -> dict[int, tuple[int, int, int, int]]:
    """GEMM operation id -> (M, N, transA, transB) as the profiled calls ran it. GEMMs of one problem (a layer's
    forward ``x @ w.t()`` and its input gradient ``grad @ w``) share their calls in the match, so the calls of
    a group of operations are dealt out among them, each call kind as many times per step as it ran: an
    operation takes its own orientation where a call ran it so, else the kind with the most calls left."""
    gemms = {op.id: op for op in operations if op.op_type in GEMM_TYPES}
    rows_of: dict[int, set[int]] = {}
    for index, op_id, _ in matched.assignments:
        if op_id in gemms:
            rows_of.setdefault(op_id, set()).add(index)
    out: dict[int, tuple[int, int, int, int]] = {}
    for group, rows in _groups(rows_of):
        left = _call_kinds(matched, table, rows)
        for op in sorted((gemms[i] for i in group), key=lambda o: o.id):
            kinds = {k: n for k, n in left.items() if n > 0 and _poses(op, k)}
            if not kinds:
                continue
            own = _own(op)
            kind = own if own in kinds else max(kinds, key=lambda k: kinds[k])
            out[op.id] = kind
            left[kind] -= max(op.count, 1)
    return out


def _groups(rows_of: Mapping[int, set[int]]) -> list[tuple[set[int], set[int]]]:
    """The operations that share matched rows, with their rows."""
    groups: list[tuple[set[int], set[int]]] = []
    for op_id, rows in rows_of.items():
        joined = [g for g in groups if g[1] & rows]
        ops, all_rows = {op_id}, set(rows)
        for g in joined:
            ops |= g[0]
            all_rows |= g[1]
            groups.remove(g)
        groups.append((ops, all_rows))
    return groups


def _call_kinds(matched: MatchResult, table: MatchTable, rows: set[int]) -> dict[tuple[int, int, int, int], float]:
    """(m, n, transA, transB) -> calls per step of the computing calls among ``rows``."""
    kinds: dict[tuple[int, int, int, int], float] = {}
    for index in sorted(rows):
        row = matched.rows.iloc[index]
        rule = table.rules.get(str(row["name"]))
        if rule is None or rule.shapes not in KERNEL_READERS:
            continue
        product = call_product(rule.shapes, row["input_shapes"], row.get("input_formats", "[]"))
        if product is not None:
            kinds[product] = kinds.get(product, 0.0) + float(row["calls"])
    return kinds


def _own(op: Operation) -> tuple[int, int, int, int]:
    p = op.param_dict
    return int(p.get("M", 0)), int(p.get("N", 0)), int(p.get("transA", 0)), int(p.get("transB", 0))


def _poses(op: Operation, product: tuple[int, int, int, int]) -> bool:
    """Whether a call's product is ``op``'s problem either way round (a batch folded otherwise is not)."""
    p = op.param_dict
    return {int(p.get("M", 0)), int(p.get("N", 0))} == {product[0], product[1]}


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
