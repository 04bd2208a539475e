"""A node description -> a one-node ONNX model and the arrays to feed it. Weights become initializers (so
onnxruntime prepacks them, as it does in a real model), activations graph inputs; constants that steer
the computation (shapes, axes, indices, exponents) keep their values, everything else is random data of
the right type and shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlbench.core.dtypes import ELEMENT_TYPES
from dlbench.core.nodes import AttributeSpec, NodeSpec, TensorSpec

#: Integer inputs that steer what a node computes (a shape, axes, pads, a count): without their values the
#: node would run another problem, so it is refused rather than fed made-up numbers.
STEERING_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "Pad": (1, 2, 3), "Resize": (1, 2, 3), "Upsample": (1,), "Split": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "TopK": (1,), "OneHot": (1,), "CumSum": (1,), "Trilu": (1,),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
}  # fmt: skip
#: Inputs whose values must lie in [0, size of the data's axis): the indices of gathers.
INDEX_INPUTS = {"Gather": 1, "GatherElements": 1}
#: Float inputs kept positive, away from where the function is undefined (input index by op type).
POSITIVE_INPUTS = {"Sqrt": 0, "Log": 0, "Pow": 0, "Reciprocal": 0, "Div": 1}


class UnrunnableNode(ValueError):
    """A node description that cannot become a model here (the message says why)."""


@dataclass(frozen=True)
class OneNodeModel:
    """The serialized model, the arrays of its graph inputs by name, and the bytes its tensors take."""

    model: bytes
    feeds: dict[str, Any]
    tensor_bytes: int


def numpy_type(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    if dtype == "string":
        raise UnrunnableNode("string tensors are not generated")
    return np.dtype(dtype)


def _array(spec: NodeSpec, index: int, tensor: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    if tensor.shape is None:
        raise UnrunnableNode(f"input {index} has no known shape")
    kind = numpy_type(tensor.dtype)
    if tensor.values is not None:
        values = np.array(tensor.values, dtype=kind)
        if values.size != math.prod(tensor.shape):
            raise UnrunnableNode(f"input {index}: {values.size} values for shape {list(tensor.shape)}")
        return values.reshape(tensor.shape)
    if tensor.dtype == "bool":
        return rng.random(tensor.shape) < 0.5
    if np.dtype(kind).kind in "iu":
        derived = _from_output_shape(spec, index)
        if derived is not None:
            return np.array(derived, dtype=kind).reshape(tensor.shape)
        if index in STEERING_INPUTS.get(spec.op_type, ()):
            raise UnrunnableNode(
                f"input {index} of {spec.op_type} ({tensor.dtype} {list(tensor.shape)}) steers the computation "
                "and its values are not known"
            )
        if INDEX_INPUTS.get(spec.op_type) == index:
            return rng.integers(0, _indexed_size(spec), tensor.shape).astype(kind)
        return np.ones(tensor.shape, dtype=kind)  # never a zero divisor
    values = rng.standard_normal(tensor.shape, dtype=np.float32)
    if POSITIVE_INPUTS.get(spec.op_type) == index:
        values = np.abs(values) + 0.5
    return values.astype(kind)


def _from_output_shape(spec: NodeSpec, index: int) -> list[int] | None:
    """The values of a shape input that the known output shape determines exactly: Reshape's and Expand's
    target and ConstantOfShape's shape are the output shape, Tile's repeats the ratio of output to input."""
    out = spec.outputs[0].shape if spec.outputs else None
    if out is None or (spec.op_type, index) not in (("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Tile", 1)):
        return None
    tensor = spec.inputs[index]
    if tensor is None or tensor.shape is None or math.prod(tensor.shape) != len(out):
        return None
    if spec.op_type != "Tile":
        return list(out)
    data = spec.inputs[0]
    if data is None or data.shape is None or len(data.shape) != len(out) or 0 in data.shape:
        return None
    return [o // i for o, i in zip(out, data.shape, strict=True)]


def _indexed_size(spec: NodeSpec) -> int:
    data = spec.inputs[0]
    if data is None or not data.shape:
        raise UnrunnableNode(f"{spec.op_type}: the data's shape is unknown")
    axis = next((int(a.value) for a in spec.attributes if a.name == "axis"), 0)
    return max(1, data.shape[axis % len(data.shape)])


def _attribute(attribute: AttributeSpec) -> Any:
    import onnx
    import onnx.helper

    kinds = {
        "int": onnx.AttributeProto.INT, "float": onnx.AttributeProto.FLOAT, "string": onnx.AttributeProto.STRING,
        "ints": onnx.AttributeProto.INTS, "floats": onnx.AttributeProto.FLOATS,
        "strings": onnx.AttributeProto.STRINGS, "tensor": onnx.AttributeProto.TENSOR,
    }  # fmt: skip
    value = attribute.value
    if attribute.kind == "tensor":
        tensor = value
        shape = tensor.shape or ()
        values = np.array(tensor.values or [0] * math.prod(shape), dtype=numpy_type(tensor.dtype)).reshape(shape)
        value = onnx.numpy_helper.from_array(values)
    elif attribute.kind in ("ints", "floats", "strings"):
        value = list(value)
    return onnx.helper.make_attribute(attribute.name, value, attr_type=kinds[attribute.kind])


def with_float_type(spec: NodeSpec, dtype: str) -> NodeSpec:
    """``spec`` with its float32 inputs in ``dtype`` (the run's dtype), other types as they are."""
    if dtype == "float32":
        return spec
    inputs = tuple(
        t if t is None or t.dtype != "float32" else TensorSpec(t.shape, dtype, t.weight, t.values) for t in spec.inputs
    )
    return NodeSpec(spec.op_type, spec.domain, spec.opsets, inputs, spec.outputs, spec.attributes, spec.name)


def build_model(spec: NodeSpec, seed: int = 0) -> OneNodeModel:
    """The one-node model of ``spec``. Its outputs are left untyped: onnxruntime infers them. A node whose
    inputs are all weights gets its first input fed, so that no constant folding removes what is timed."""
    import onnx
    import onnx.helper
    import onnx.numpy_helper

    rng = np.random.default_rng(seed)
    names, graph_inputs, initializers = [], [], []
    feeds: dict[str, Any] = {}
    total = 0
    fed_any = any(t is not None and not t.weight for t in spec.inputs)
    for index, tensor in enumerate(spec.inputs):
        if tensor is None:
            names.append("")
            continue
        name = f"input_{index}"
        names.append(name)
        array = _array(spec, index, tensor, rng)
        total += array.nbytes
        if tensor.weight and (fed_any or index > 0):
            initializers.append(onnx.numpy_helper.from_array(array, name))
            continue
        fed_any = True
        graph_inputs.append(onnx.helper.make_tensor_value_info(name, ELEMENT_TYPES[tensor.dtype], list(array.shape)))
        feeds[name] = array
    outputs = [f"output_{i}" for i in range(len(spec.outputs))]
    for out in spec.outputs:
        if out.shape is not None:
            total += math.prod(out.shape) * np.dtype(numpy_type(out.dtype)).itemsize
    node = onnx.helper.make_node(spec.op_type, names, outputs, name=spec.name or spec.op_type, domain=spec.domain)
    node.attribute.extend(_attribute(a) for a in spec.attributes)
    graph = onnx.helper.make_graph(
        [node], "dlbench_node", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outputs], initializers
    )
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in spec.opsets]
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="dlbench")
    model.ir_version = max(onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True), 7)
    return OneNodeModel(model.SerializeToString(), feeds, total)
