"""Which passes one reported time covers, and what they cost together. A registry entry with
``passes: [forward, backward_data, backward_weights]`` times a layer's whole training step per call, so its
FLOPs and bytes (and GFLOP/s) are those of all three problems, not of the forward one alone. The problem of
each backward pass follows from the forward one by the shipped training-unfolding table
(``conf/unfold/default.yaml``), the same rules ``unfold=default`` uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from dlbench.core.descriptors import operation_cost
from dlbench.core.dtypes import DTYPE_BYTES
from dlbench.core.values import Operation
from dlbench.onnx.unfold import DERIVED, FREE, UnfoldError, UnfoldTable, load_table

FORWARD = "forward"


@lru_cache(maxsize=1)
def _table() -> UnfoldTable:
    return load_table()


def known_passes(op_type: str) -> list[str]:
    """``forward`` and the backward passes the unfolding table derives for ``op_type``."""
    names = [FORWARD]
    for rule in _table().rules_for(op_type):
        if rule.pass_name not in names:
            names.append(rule.pass_name)
    return names


def check_passes(passes: Sequence[str], op_types: Sequence[str]) -> tuple[str, ...]:
    """``passes`` validated against the op types an entry serves; a ValueError names what is allowed."""
    allowed = [name for op_type in op_types for name in known_passes(op_type)]
    for name in passes:
        if name not in allowed:
            raise ValueError(
                f"{name!r} is not a pass of {', '.join(op_types)}; use {', '.join(dict.fromkeys(allowed))}"
            )
    if len(set(passes)) != len(passes):
        raise ValueError(f"{list(passes)} names a pass twice")
    return tuple(passes)


def cost_of_passes(operation: Operation, passes: Sequence[str], dtype: str = "float32") -> tuple[float, float]:
    """FLOPs and bytes of ``passes`` of ``operation`` (taken as the forward problem), summed; (0, 0) when
    a pass's problem cannot be derived, so no GFLOP/s is claimed for it."""
    dtype_bytes = DTYPE_BYTES.get(dtype, 4)
    forward = tuple((d, 0 if d == "mode" else v) for d, v in operation.params)
    values = {d: v for d, v in forward if d != "?"}
    flops = moved = 0.0
    for name in passes:
        if name == FORWARD:
            problems = [(operation.op_type, values)]
        else:
            try:
                rules = [r for r in _table().rules_for(operation.op_type) if r.pass_name == name and r.applies(values)]
                problems = [(r.derived_op_type, dict(r.derive(forward))) for r in rules if r.kind == DERIVED]
            except (UnfoldError, ArithmeticError, TypeError):
                return 0.0, 0.0
            if rules and all(r.kind == FREE for r in rules):
                continue  # a view or a gradient passed through: nothing to add
        if not problems:
            return 0.0, 0.0
        for op_type, params in problems:
            f, b = operation_cost(op_type, params, dtype_bytes)
            flops, moved = flops + f, moved + b
    return flops, moved


def with_passes(operations: Sequence[Operation], passes: Sequence[str], dtype: str = "float32") -> list[Operation]:
    """``operations`` as measured by an implementation whose one time covers ``passes`` (unchanged when it
    declares none): their FLOPs and bytes cover every pass, and they name the passes."""
    if not passes:
        return list(operations)
    costed = []
    for op in operations:
        flops, moved = cost_of_passes(op, passes, op.dtype or dtype)  # a row of its own dtype: its bytes
        costed.append(replace(op, flops=flops or None, bytes_moved=moved or None, timed_passes=tuple(passes)))
    return costed
