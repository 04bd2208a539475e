"""ONNX node attributes as readable values and as flattened benchmark parameters (``name_i``)."""

from __future__ import annotations

import math
from typing import Any

from dlbench.core.values import Number

#: Tensor attributes with at most this many elements are flattened into parameters (``value_0``, ...).
MAX_FLATTENED_TENSOR = 16


class UnhandledAttribute(Exception):
    pass


def tensor_values(tensor: Any) -> list[Number] | None:
    import onnx.numpy_helper

    if math.prod(tensor.dims) > MAX_FLATTENED_TENSOR:
        return None
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError):
        return None
    if array.dtype.kind not in "biuf":
        return None
    return [v.item() if hasattr(v, "item") else v for v in array.reshape(-1)]


def tensor_summary(tensor: Any) -> str:
    import onnx

    dtype = onnx.TensorProto.DataType.Name(tensor.data_type).lower()
    return f"tensor {dtype}[{','.join(str(d) for d in tensor.dims)}]"


def _float32(value: float) -> float:
    """An attribute float (stored as float32) as the shortest decimal that reads back to it: 1e-05, not
    9.999999747378752e-06."""
    import numpy as np

    return float(str(np.float32(value)))


def read_attributes(node: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Number]]]:
    """Every attribute as a readable value, plus the numeric ones flattened as parameters (``name``,
    ``name_i``). Raises :class:`UnhandledAttribute` for types that have no meaning as a benchmark
    parameter (subgraphs, type protos)."""
    import onnx

    kinds = onnx.AttributeProto
    readable: list[tuple[str, Any]] = []
    params: list[tuple[str, Number]] = []
    for attr in node.attribute:
        kind = attr.type
        name = attr.name
        if kind == kinds.FLOAT:
            readable.append((name, _float32(attr.f)))
            params.append((name, _float32(attr.f)))
        elif kind == kinds.INT:
            readable.append((name, int(attr.i)))
            params.append((name, int(attr.i)))
        elif kind == kinds.FLOATS:
            values = [_float32(v) for v in attr.floats]
            readable.append((name, values))
            params.extend((f"{name}_{i}", v) for i, v in enumerate(values))
        elif kind == kinds.INTS:
            values = [int(v) for v in attr.ints]
            readable.append((name, values))
            params.extend((f"{name}_{i}", v) for i, v in enumerate(values))
        elif kind == kinds.STRING:
            readable.append((name, attr.s.decode("utf-8", errors="replace")))
        elif kind == kinds.STRINGS:
            readable.append((name, [s.decode("utf-8", errors="replace") for s in attr.strings]))
        elif kind == kinds.TENSOR:
            values = tensor_values(attr.t)
            if values is None:
                readable.append((name, tensor_summary(attr.t)))
            else:
                readable.append((name, values))
                params.extend((f"{name}_{i}", v) for i, v in enumerate(values))
        elif kind == kinds.TENSORS:
            readable.append((name, [tensor_summary(t) for t in attr.tensors]))
        elif kind == kinds.SPARSE_TENSOR:
            sparse = attr.sparse_tensor
            readable.append((name, f"sparse {tensor_summary(sparse.values)} of dims {list(sparse.dims)}"))
        elif kind == kinds.SPARSE_TENSORS:
            readable.append((name, [f"sparse tensor of dims {list(s.dims)}" for s in attr.sparse_tensors]))
        elif kind in (kinds.GRAPH, kinds.GRAPHS):
            raise UnhandledAttribute(
                f"attribute {name!r} is a subgraph ({kinds.AttributeType.Name(kind)}); control-flow "
                "bodies are not extracted"
            )
        else:
            type_name = kinds.AttributeType.Name(kind) if kind in kinds.AttributeType.values() else str(kind)
            raise UnhandledAttribute(
                f"attribute {name!r} has type {type_name}, which dlbench does not extract "
                "(handled: FLOAT(S), INT(S), STRING(S), TENSOR(S), SPARSE_TENSOR(S); GRAPH(S) are reported)"
            )
    return readable, params
