"""What mixed precision adds to a training step besides its network's operators, as operations of their own:
the casts autocast inserted (the weights once per forward, the activations entering a lower-precision op, and
their gradients cast back in the backward) and GradScaler's unscale-and-check of the gradients and its scale
update. They are read from the profile, where every cast is an ``aten::copy_`` between two floating dtypes
(``aten::_to_copy`` > ``aten::copy_``): one ``Cast`` operation per shape and pair of dtypes, counted as many
times per step as it ran, in pass ``autocast``; ``AmpUnscale`` (the gradients' tensors and elements, from the
optimizer's record), ``AmpUpdateScale`` and the loss's scaling (a scalar ``Mul``: the loss and its gradient
times the scale) in pass ``grad_scaler``. ``conf/match/default.yaml`` gives their
profiled calls to them, so their time leaves the framework share, counted once.

A ``Cast`` operation's ``dtype`` is its input's, its ``to`` the ONNX element type of its output (the torch
backend's Cast kernel casts from the row's dtype to ``to``). Scalar casts (a 0-dim learning rate or loss
scale) stay framework time.

A copy within one dtype between two memory formats (a gradient made contiguous for a channels_last weight, an
input converted) is a layout conversion: a ``Cast`` to its own element type whose ``memory_format`` is the one it
converts into (the torch backend's Cast kernel then copies from the other format), in pass ``layout``, one per
shape, dtype and direction: the script's own (a batch converted in the step) and those of framework calls (a
``flatten`` of NHWC activations copies them to NCHW). One made by the kernel of an operator that is benchmarked
(``convolution_backward`` converting its weight gradient into the weight's layout; the profile's ``within``) is
part of that operator and of its benchmark, which runs the same kernel in the same layouts. A copy within one
format (``.contiguous()`` of a view) stays framework time."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

import pandas as pd

from dlbench.analysis.call_fields import json_list, layout_conversion
from dlbench.analysis.predict import LAYOUT_PASS, MIXED_PRECISION_PASSES
from dlbench.core.costs import operation_cost
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.dtypes import DTYPE_BYTES, ELEMENT_TYPES, FLOAT_TYPES
from dlbench.core.shapes import rank4
from dlbench.core.values import Operation, operation_name

#: the passes of the operations made here (``TrainingStep.passes``; the match table's rules name them; the
#: prediction's ``mixed_precision`` term sums them)
CAST_PASS, SCALER_PASS = MIXED_PRECISION_PASSES
#: the profiled operator of every cast, and of GradScaler's two steps
CAST_OPERATOR = "aten::copy_"
UNSCALE_OPERATOR = "aten::_amp_foreach_non_finite_check_and_unscale_"
UPDATE_OPERATOR = "aten::_amp_update_scale_"
#: the profiled operator of the loss's scaling (``scaler.scale(loss)``: the 0-dim loss times the scale) and of
#: its gradient (the incoming gradient times the scale)
SCALE_OPERATOR = "aten::mul"
#: a scalar Mul (A and B one element each, forward), the loss's scaling as the Mul kernel poses it
LOSS_SCALING = {**{d: 1 for d in ("N", "C", "H", "W", "N_b", "C_b", "H_b", "W_b")}, "mode": 0}


def cast_kind(input_shapes: Any, input_types: Any) -> tuple[tuple[int, ...], str, str] | None:
    """(shape, from, to) of a profiled ``aten::copy_(destination, source)`` that converts between two floating
    dtypes; None for a copy within one dtype, from or to an integer, or of a scalar."""
    shapes, types = json_list(input_shapes), json_list(input_types)
    if len(shapes) < 2 or len(types) < 2 or not isinstance(shapes[1], list) or not shapes[1]:
        return None
    to, source = str(types[0]), str(types[1])
    if to == source or to not in FLOAT_TYPES or source not in FLOAT_TYPES:
        return None
    return tuple(int(d) for d in shapes[1]), source, to


def layout_kind(input_shapes: Any, input_types: Any, input_formats: Any) -> tuple[tuple[int, ...], str, str] | None:
    """(shape, dtype, the format it converts into) of a profiled ``aten::copy_(destination, source)`` within one
    floating dtype between two memory formats; None for any other copy."""
    shapes = json_list(input_shapes)
    conversion = layout_conversion(json_list(input_types), json_list(input_formats))
    if conversion is None or len(shapes) < 2 or not isinstance(shapes[1], list) or not shapes[1]:
        return None
    dtype, _, into = conversion
    return tuple(int(d) for d in shapes[1]), dtype, into


def _operation(
    op_id: int, op_type: str, params: Mapping[str, Any], count: int, dtype: str, memory_format: str = ""
) -> Operation:
    ordered = tuple((d, params[d]) for d in DESCRIPTORS.get(op_type, list(params)) if d in params)
    flops, moved = operation_cost(op_type, dict(ordered), DTYPE_BYTES.get(dtype, 4))
    return Operation(op_id, op_type, ordered, name=operation_name(op_type, ordered), count=count,
                     flops=flops or None, bytes_moved=moved or None, dtype=dtype,
                     memory_format=memory_format)  # fmt: skip


def layout_operations(profile: pd.DataFrame, first_id: int, benchmarked: Container[str]) -> list[tuple[Operation, str]]:
    """The step's layout conversions with their pass, numbered from ``first_id``: one ``Cast`` per shape, dtype
    and format converted into, counted as many times per step as it ran (calls rounded to whole ones). A copy
    made within an operator of ``benchmarked`` (the profiled names the match table gives to operations) is part
    of that operator and of its benchmark."""
    kinds: dict[tuple[tuple[int, ...], str, str], float] = {}
    for row in profile[profile["name"] == CAST_OPERATOR].itertuples(index=False):
        if getattr(row, "within", "") in benchmarked:
            continue
        kind = layout_kind(row.input_shapes, getattr(row, "input_types", "[]"), getattr(row, "input_formats", "[]"))
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0.0) + float(row.calls)
    out: list[tuple[Operation, str]] = []
    for (shape, dtype, into), calls in kinds.items():
        if round(calls) >= 1:
            params = {**dict(zip("NCHW", rank4("Cast", shape), strict=True)), "to": ELEMENT_TYPES[dtype], "mode": 0}
            out.append((_operation(first_id + len(out), "Cast", params, round(calls), dtype, into), LAYOUT_PASS))
    return out


def amp_operations(
    profile: pd.DataFrame, optimizers: Sequence[Mapping[str, Any]] | None, first_id: int
) -> list[tuple[Operation, str]]:
    """The step's casts and GradScaler operations with their passes, numbered from ``first_id``: one per
    cast kind of the per-step profile (calls rounded to whole ones), and the unscale and update where the
    profile has them (the unscale over the gradients of ``optimizers``' records)."""
    casts: dict[tuple[tuple[int, ...], str, str], float] = {}
    for row in profile[profile["name"] == CAST_OPERATOR].itertuples(index=False):
        kind = cast_kind(row.input_shapes, getattr(row, "input_types", "[]"))
        if kind is not None:
            casts[kind] = casts.get(kind, 0.0) + float(row.calls)
    out: list[tuple[Operation, str]] = []
    for (shape, source, to), calls in casts.items():
        if round(calls) < 1:
            continue
        params = {**dict(zip("NCHW", rank4("Cast", shape), strict=True)), "to": ELEMENT_TYPES[to], "mode": 0}
        out.append((_operation(first_id + len(out), "Cast", params, round(calls), source), CAST_PASS))
    scaler_calls = {name: float(profile.loc[profile["name"] == name, "calls"].sum())
                    for name in (UNSCALE_OPERATOR, UPDATE_OPERATOR)}  # fmt: skip
    if round(scaler_calls[UNSCALE_OPERATOR]) >= 1:
        shapes = [s for record in optimizers or () for group in record.get("groups", ()) for s in group["shapes"]]
        elements = sum(int(_product(s)) for s in shapes)
        params = {"tensors": len(shapes), "elements": elements}
        out.append((_operation(first_id + len(out), "AmpUnscale", params, round(scaler_calls[UNSCALE_OPERATOR]),
                               "float32"), SCALER_PASS))  # fmt: skip
    if round(scaler_calls[UPDATE_OPERATOR]) >= 1:
        out.append((_operation(first_id + len(out), "AmpUpdateScale", {"N": 1}, round(scaler_calls[UPDATE_OPERATOR]),
                               "float32"), SCALER_PASS))  # fmt: skip
    scalings = loss_scalings(profile) if round(scaler_calls[UNSCALE_OPERATOR]) >= 1 else {}
    for dtype, calls in scalings.items():
        out.append((_operation(first_id + len(out), "Mul", LOSS_SCALING, round(calls), dtype), SCALER_PASS))
    return out


def loss_scalings(profile: pd.DataFrame) -> dict[str, float]:
    """Per dtype, the calls per step of ``aten::mul`` on two 0-dim floating tensors: GradScaler's scaling of
    the loss and of its gradient in the backward (a multiply by a Python number records no second dtype; the
    caller asks only when GradScaler ran)."""
    out: dict[str, float] = {}
    for row in profile[profile["name"] == SCALE_OPERATOR].itertuples(index=False):
        shapes, types = json_list(row.input_shapes), json_list(getattr(row, "input_types", "[]"))
        if len(shapes) == 2 and shapes == [[], []] and len(types) == 2 and all(t in FLOAT_TYPES for t in types):
            out[str(types[0])] = out.get(str(types[0]), 0.0) + float(row.calls)
    return {dtype: calls for dtype, calls in out.items() if round(calls) >= 1}


def amp_notes(added: Sequence[tuple[Operation, str]]) -> list[str]:
    """One note naming what mixed precision added to the step (none when nothing was)."""
    casts = [op for op, pass_name in added if pass_name == CAST_PASS]
    scaler = [_scaler_name(op) for op, pass_name in added if pass_name == SCALER_PASS]
    if not added:
        return []
    text = f"mixed precision: {len(casts)} cast(s) ({sum(op.count for op in casts)} per step) as operations"
    return [text + (f", and GradScaler's {' and '.join(scaler)}" if scaler else "")]


def _scaler_name(op: Operation) -> str:
    return "loss scaling" if op.op_type == "Mul" else op.op_type


def _product(shape: Sequence[int]) -> int:
    total = 1
    for d in shape:
        total *= int(d)
    return total


def layout_notes(converted: Sequence[tuple[Operation, str]]) -> list[str]:
    """One note naming the layout conversions made operations (none when the step made none)."""
    if not converted:
        return []
    calls = sum(op.count for op, _ in converted)
    return [f"layout conversions: {len(converted)} copy kind(s) between memory formats ({calls} per step) as ops"]
