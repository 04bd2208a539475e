"""Operations of a configured operator benchmark: each entry of ``benchmark.operations`` over ``common``."""

from __future__ import annotations

from dlbench.config import BenchmarkConfig
from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.dtypes import DTYPE_BYTES
from dlbench.core.values import Number, Operation

META_KEYS = ("name", "count")


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


def operations_from_benchmark(benchmark: BenchmarkConfig, dtype: str = "float32") -> list[Operation]:
    """Operations with ids 0..n-1, parameters in the operator's canonical order, FLOPs and bytes attached."""
    canonical = DESCRIPTORS.get(benchmark.op_type, [])
    operations = []
    for index, entry in enumerate(benchmark.operations):
        merged = {**benchmark.common, **entry}
        where = f"benchmark {benchmark.name}, operations[{index}]"
        params = {k: _number(v, f"{where}, {k}") for k, v in merged.items() if k not in META_KEYS}
        ordered = [d for d in canonical if d in params] + [d for d in params if d not in canonical]
        flops, moved = operation_cost(benchmark.op_type, params, DTYPE_BYTES.get(dtype, 4))
        operations.append(
            Operation(
                id=index,
                op_type=benchmark.op_type,
                params=tuple((d, params[d]) for d in ordered),
                name=str(merged.get("name", "")),
                count=int(merged.get("count", 1)),
                nodes=(f"{benchmark.name}.operations[{index}]",),
                flops=flops or None,
                bytes_moved=moved or None,
            )
        )
    return operations
