"""An extracted node as a :class:`dlbench.core.nodes.NodeSpec`: what an executable needs to run that one node
alone (the onnxruntime backend builds a one-node model from it). Extraction calls :func:`node_spec` for each
node with the shapes, element types and constant values it inferred."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dlbench.core.dtypes import ELEMENT_TYPE_NAMES
from dlbench.core.nodes import AttributeSpec, NodeSpec, TensorSpec

Shape = tuple[int, ...]

#: Constants with at most this many elements travel with their values (shapes, axes, scalars); integer and
#: boolean ones up to :data:`MAX_INDEX_VALUES` (indices, masks). Larger weights are random data at run time.
MAX_FLOAT_VALUES = 64
MAX_INDEX_VALUES = 4096


class NodeSpecError(ValueError):
    """A node that cannot be described for running alone (the message says why)."""


def _type_name(number: int | None, what: str) -> str:
    if number is None or number not in ELEMENT_TYPE_NAMES:
        raise NodeSpecError(f"{what}: element type {number} unknown or not supported")
    return ELEMENT_TYPE_NAMES[number]


def _embedded(values: Any, dtype: str) -> tuple[Any, ...] | None:
    if values is None:
        return None
    limit = MAX_FLOAT_VALUES if dtype.startswith(("float", "bfloat")) else MAX_INDEX_VALUES
    if values.size > limit:
        return None
    return tuple(v.item() for v in values.reshape(-1))


def _attribute(attr: Any, where: str) -> AttributeSpec:
    import onnx
    import onnx.numpy_helper

    kinds = onnx.AttributeProto
    if attr.type == kinds.INT:
        return AttributeSpec(attr.name, "int", int(attr.i))
    if attr.type == kinds.FLOAT:
        return AttributeSpec(attr.name, "float", float(attr.f))
    if attr.type == kinds.STRING:
        return AttributeSpec(attr.name, "string", attr.s.decode("utf-8", errors="replace"))
    if attr.type == kinds.INTS:
        return AttributeSpec(attr.name, "ints", tuple(int(v) for v in attr.ints))
    if attr.type == kinds.FLOATS:
        return AttributeSpec(attr.name, "floats", tuple(float(v) for v in attr.floats))
    if attr.type == kinds.STRINGS:
        return AttributeSpec(attr.name, "strings", tuple(s.decode("utf-8", errors="replace") for s in attr.strings))
    if attr.type == kinds.TENSOR and math.prod(attr.t.dims) <= MAX_INDEX_VALUES:
        array = onnx.numpy_helper.to_array(attr.t)
        dtype = _type_name(int(attr.t.data_type), f"{where}: attribute {attr.name!r}")
        values = tuple(v.item() for v in array.reshape(-1))
        return AttributeSpec(attr.name, "tensor", TensorSpec(tuple(int(d) for d in attr.t.dims), dtype, True, values))
    raise NodeSpecError(
        f"{where}: attribute {attr.name!r} of type {kinds.AttributeType.Name(attr.type)} is not carried "
        "(subgraphs, sparse and large tensors)"
    )


def node_spec(
    node: Any,
    opsets: Mapping[str, int],
    input_shapes: Sequence[Shape | None],
    output_shapes: Sequence[Shape | None],
    types: Mapping[str, int],
    weights: Sequence[bool],
    values: Mapping[str, Any],
) -> NodeSpec:
    """``node`` with its inputs' shapes (None for an omitted optional input), element types (``types`` by
    tensor name), which inputs are weights (computed from initializers and constants only) and the values of
    small constants (``values`` by tensor name)."""
    where = f"node {node.name or node.op_type!r} ({node.op_type})"
    inputs: list[TensorSpec | None] = []
    for name, shape, weight in zip(node.input, input_shapes, weights, strict=True):
        if not name:
            inputs.append(None)
            continue
        if shape is None:
            raise NodeSpecError(f"{where}: the shape of input {name!r} is unknown")
        dtype = _type_name(types.get(name), f"{where}: input {name!r}")
        embedded = _embedded(values.get(name), dtype) if weight else None
        inputs.append(TensorSpec(tuple(int(d) for d in shape), dtype, bool(weight), embedded))
    outputs = [
        TensorSpec(
            None if shape is None else tuple(int(d) for d in shape), ELEMENT_TYPE_NAMES.get(types.get(o, 1), "float32")
        )
        for o, shape in zip(node.output, output_shapes, strict=True)
    ]
    domain = node.domain if node.domain != "ai.onnx" else ""
    needed = {d: v for d, v in opsets.items() if d in ("", domain)}
    return NodeSpec(
        op_type=node.op_type,
        domain=domain,
        opsets=needed,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        attributes=tuple(_attribute(a, where) for a in node.attribute),
        name=node.name,
    )
