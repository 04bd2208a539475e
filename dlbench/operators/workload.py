"""Operations of a configured operator benchmark: each entry of ``benchmark.operations`` over ``common``, in the
dtype and memory format the entry names, else as ``amp=`` and ``channels_last=`` set them for the sweep (as they
do for a model's operations, :func:`with_precision`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dlbench.config import BenchmarkConfig
from dlbench.core.autocast import autocast_dtype
from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.dtypes import DTYPE_BYTES, MEMORY_FORMATS, SHORT_NAMES
from dlbench.core.errors import ConfigurationError
from dlbench.core.settings import ROW_DTYPES
from dlbench.core.values import Number, Operation, operation_name

META_KEYS = ("name", "count", "dtype", "memory_format")
#: the op types whose 4-D tensors ``channels_last=true`` lays out NHWC in an operator sweep: a CNN's convolution,
#: normalisation, pooling and the elementwise ops between them (a matmul or softmax has no channels to move)
CHANNELS_LAST_OP_TYPES = frozenset({
    "Conv", "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Add", "Mul", "Sub", "Div",
    "Sqrt", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Clip", "Gelu",
})  # fmt: skip


def _number(value: object, where: str) -> Number:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            as_float = float(value)
        except ValueError:
            raise ValueError(f"{where}: {value!r} is not a number") from None
        return int(as_float) if as_float.is_integer() else as_float
    raise ValueError(f"{where}: {value!r} is not a number")


def _choice(merged: dict, key: str, allowed: tuple[str, ...], where: str) -> str:
    value = str(merged.get(key, "") or "")
    if value and value not in allowed:
        raise ConfigurationError(f"{where}: {key}={value!r}: use one of {', '.join(allowed)}")
    return value


def operations_from_benchmark(
    benchmark: BenchmarkConfig,
    dtype: str = "float32",
    amp: str = "none",
    channels_last: bool = False,
    device: str = "cpu",
) -> list[Operation]:
    """Operations with ids 0..n-1, parameters in the operator's canonical order, FLOPs and bytes attached.

    An entry's ``dtype`` and ``memory_format`` are its own (its name gets the dtype, so two rows of one shape
    stay apart); else ``amp`` lowers autocast's ops on ``device`` (:mod:`dlbench.core.autocast`) and
    ``channels_last`` lays out the 4-D tensors of :data:`CHANNELS_LAST_OP_TYPES`. Empty: the sweep's ``dtype``,
    contiguous."""
    canonical = DESCRIPTORS.get(benchmark.op_type, [])
    swept_dtype, swept_layout = swept_as(benchmark.op_type, dtype, amp, channels_last, device)
    operations = []
    for index, entry in enumerate(benchmark.operations):
        merged = {**benchmark.common, **entry}
        where = f"benchmark {benchmark.name}, operations[{index}]"
        params = {k: _number(v, f"{where}, {k}") for k, v in merged.items() if k not in META_KEYS}
        ordered = [d for d in canonical if d in params] + [d for d in params if d not in canonical]
        own_dtype = _choice(merged, "dtype", ROW_DTYPES, where)
        own_layout = _choice(merged, "memory_format", MEMORY_FORMATS, where)
        row_dtype, layout = own_dtype or swept_dtype, own_layout or swept_layout
        flops, moved = operation_cost(benchmark.op_type, params, DTYPE_BYTES.get(row_dtype or dtype, 4))
        name = str(merged.get("name", ""))
        if not name and (own_dtype or own_layout):
            base = operation_name(benchmark.op_type, tuple((d, params[d]) for d in ordered))
            name = "_".join(filter(None, (base, SHORT_NAMES.get(own_dtype, own_dtype), own_layout)))
        operations.append(
            Operation(
                id=index,
                op_type=benchmark.op_type,
                params=tuple((d, params[d]) for d in ordered),
                name=name,
                count=int(merged.get("count", 1)),
                nodes=(f"{benchmark.name}.operations[{index}]",),
                flops=flops or None,
                bytes_moved=moved or None,
                dtype=row_dtype,
                memory_format=layout,
            )
        )
    return operations


def swept_as(op_type: str, dtype: str, amp: str, channels_last: bool, device: str) -> tuple[str, str]:
    """The dtype and memory format ``amp`` and ``channels_last`` give an operation of ``op_type`` (empty: the
    sweep's ``dtype``, contiguous)."""
    lowered = autocast_dtype(op_type, amp, device) or ""
    layout = "channels_last" if channels_last and op_type in CHANNELS_LAST_OP_TYPES else ""
    return ("" if lowered == dtype else lowered), layout


def with_precision(
    operations: Sequence[Operation], dtype: str, amp: str, channels_last: bool, device: str
) -> list[Operation]:
    """A model's operations as ``amp`` and ``channels_last`` run them (``task=benchmark_model``), their bytes at
    their own dtype; an operation that already names a dtype or memory format keeps it."""
    out = []
    for op in operations:
        swept_dtype, layout = swept_as(op.op_type, dtype, amp, channels_last, device)
        row_dtype, row_layout = op.dtype or swept_dtype, op.memory_format or layout
        if (row_dtype, row_layout) == (op.dtype, op.memory_format):
            out.append(op)
            continue
        bytes_moved = op.bytes_moved
        if row_dtype != op.dtype:  # the compulsory bytes at the dtype it runs in
            bytes_moved = operation_cost(op.op_type, op.param_dict, DTYPE_BYTES.get(row_dtype, 4))[1] or bytes_moved
        out.append(replace(op, dtype=row_dtype, memory_format=row_layout, bytes_moved=bytes_moved))
    return out
