"""The ONNX node of an operation known only by its canonical parameters (a configured benchmark such as
``+benchmark=conv``, not an extracted model): the inverse of :mod:`dlbench.onnx.describe` for the operators
dlbench has descriptors for. Forward passes only: onnxruntime runs inference."""

from __future__ import annotations

from collections.abc import Mapping

from dlbench.core.glue import GLUE_OP_TYPES, InvalidParameters, glue_tensors, integer
from dlbench.core.nodes import AttributeSpec, NodeSpec, TensorSpec
from dlbench.core.values import Number

#: One opset for every node built here: Gelu needs 20; ReduceMean's axes are an input from 18.
OPSET = 20


def _tensor(shape: tuple[int, ...], dtype: str = "float32", weight: bool = False, values=None) -> TensorSpec:
    return TensorSpec(tuple(int(d) for d in shape), dtype, weight, None if values is None else tuple(values))


def _ints(*values: int) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _node(op_type: str, inputs: list, outputs: int = 1, **attributes: object) -> NodeSpec:
    """A node of the default domain at :data:`OPSET`; attribute kinds follow the Python values."""
    specs = []
    for name, value in attributes.items():
        if isinstance(value, AttributeSpec):
            specs.append(value)
        elif isinstance(value, tuple | list):
            kind = "floats" if any(isinstance(v, float) for v in value) else "ints"
            specs.append(AttributeSpec(name, kind, tuple(value)))
        elif isinstance(value, str):
            specs.append(AttributeSpec(name, "string", value))
        else:
            specs.append(AttributeSpec(name, "float" if isinstance(value, float) else "int", value))
    return NodeSpec(
        op_type, "", {"": OPSET}, tuple(inputs), tuple(TensorSpec(None, "float32") for _ in range(outputs)),
        tuple(specs),
    )  # fmt: skip


def _fused_matmul(operands: list, trans_a: int, trans_b: int) -> NodeSpec:
    """onnxruntime's ``com.microsoft`` FusedMatMul: a (batched) MatMul reading either operand transposed."""
    plain = _node("MatMul", operands, transA=trans_a, transB=trans_b, alpha=1.0)
    return NodeSpec("FusedMatMul", "com.microsoft", {"": OPSET, "com.microsoft": 1}, plain.inputs, plain.outputs,
                    plain.attributes)  # fmt: skip


def _nchw(p: Mapping[str, Number], suffix: str = "") -> tuple[int, ...]:
    return tuple(integer(p, f"{d}{suffix}", 1, minimum=1) for d in "NCHW")


#: op types whose descriptors have an inference forward (mode 2): onnxruntime runs that one as mode 0
INFERENCE_MODES = frozenset({"BatchNormalization", "MaxPool", "AveragePool"})


def forward_mode(op_type: str, mode: int) -> bool:
    """Whether ``mode`` is a forward pass onnxruntime runs: 0, or 2 (inference) where the op has one."""
    return mode == 0 or (mode == 2 and op_type in INFERENCE_MODES)


def canonical_node(op_type: str, p: Mapping[str, Number]) -> NodeSpec:
    """The forward node of ``op_type`` with canonical parameters ``p``; raises :class:`InvalidParameters` for
    a backward pass or an operator without canonical descriptors (SGD is no ONNX operator)."""
    mode = integer(p, "mode", 0)
    if not forward_mode(op_type, mode):
        raise InvalidParameters(f"mode={mode}: onnxruntime runs the forward pass (inference) only")
    if op_type in GLUE_OP_TYPES:
        return _glue_node(op_type, p)
    if op_type == "Conv":
        n, c, h, w = _nchw(p)
        k, group = integer(p, "K"), integer(p, "group", 1)
        kernel = _ints(p["kernel_shape_0"], p["kernel_shape_1"])
        weight = _tensor((k, c // max(group, 1), *kernel), weight=True)
        bias = [_tensor((k,), weight=True)] if integer(p, "has_bias", 0) else []  # as the model's node: an input
        return _node(
            "Conv", [_tensor((n, c, h, w)), weight, *bias], kernel_shape=kernel,
            pads=_ints(*(p[f"pads_{i}"] for i in range(4))), strides=_ints(p["strides_0"], p["strides_1"]),
            dilations=_ints(p.get("dilations_0", 1), p.get("dilations_1", 1)), group=group,
        )  # fmt: skip
    if op_type in ("Gemm", "MatMul"):
        m, k, n, batch = (integer(p, key, 1, minimum=1) for key in ("M", "K", "N", "batch"))
        trans_a, trans_b = integer(p, "transA", 0), integer(p, "transB", 0)
        a = (k, m) if trans_a else (m, k)
        b = (n, k) if trans_b else (k, n)
        if op_type == "Gemm" and batch == 1:
            return _node("Gemm", [_tensor(a), _tensor(b, weight=True)], transA=trans_a, transB=trans_b)
        lead = (batch,) if batch > 1 else ()
        operands = [_tensor((*lead, *a)), _tensor((*lead, *b), weight=not lead)]
        if trans_a or trans_b:  # what onnxruntime fuses a Transpose and a MatMul into (attention's Q K^T)
            return _fused_matmul(operands, trans_a, trans_b)
        return _node("MatMul", operands)
    n, c, h, w = _nchw(p)
    x = _tensor((n, c, h, w))
    if op_type == "BatchNormalization":
        return batchnorm_for_mode(
            _node("BatchNormalization", [x, *(_tensor((c,), weight=True) for _ in range(4))],
                  epsilon=float(p.get("epsilon", 1e-5)), momentum=float(p.get("momentum", 0.9))),
            mode,
        )  # fmt: skip
    if op_type in ("Relu", "GlobalAveragePool"):
        return _node(op_type, [x])
    if op_type == "Add":
        return _node("Add", [x, _tensor(_nchw(p, "_b"))])
    if op_type == "Softmax":
        return _node("Softmax", [x], axis=integer(p, "axis", -1))
    if op_type == "LayerNormalization":
        axis = integer(p, "axis", -1) % 4
        normalized = (n, c, h, w)[axis:]
        scale, bias = _tensor(normalized, weight=True), _tensor(normalized, weight=True)
        return _node("LayerNormalization", [x, scale, bias], axis=axis, epsilon=float(p.get("epsilon", 1e-5)))
    if op_type in ("MaxPool", "AveragePool"):
        return _node(
            op_type, [x], kernel_shape=_ints(p["kernel_shape_0"], p["kernel_shape_1"]),
            pads=_ints(*(p[f"pads_{i}"] for i in range(4))), strides=_ints(p["strides_0"], p["strides_1"]),
            ceil_mode=integer(p, "ceil_mode", 0),
        )  # fmt: skip
    raise InvalidParameters(f"{op_type} has no ONNX node dlbench can build from its parameters")


def batchnorm_for_mode(spec: NodeSpec, mode: int) -> NodeSpec:
    """A BatchNormalization node as its ``mode`` says: 0 training (batch statistics, also the running
    mean and variance as outputs), 2 inference; whatever the exported node's own ``training_mode``. A node of
    an opset before 14 runs as BatchNormalization-15 (same inputs), the first version with training_mode."""
    legacy = ("training_mode", "spatial", "is_test", "consumed_inputs")
    attributes = tuple(a for a in spec.attributes if a.name not in legacy)
    outputs, opsets = spec.outputs[:1], spec.opset_map
    if mode == 0:
        attributes += (AttributeSpec("training_mode", "int", 1),)
        outputs += tuple(TensorSpec(None, "float32") for _ in range(2))
        opsets[spec.domain] = max(15, spec.opset)
    return NodeSpec(spec.op_type, spec.domain, opsets, spec.inputs, outputs, attributes, spec.name)


def _glue_node(op_type: str, p: Mapping[str, Number]) -> NodeSpec:
    tensors = glue_tensors(op_type, p)
    x = tensors.inputs[0]
    if op_type == "Gelu":
        return _node("Gelu", [_tensor(x)], approximate="tanh" if integer(p, "approximate", 0) else "none")
    if op_type == "Cast":
        return _node("Cast", [_tensor(x)], to=integer(p, "to", 1))
    if op_type == "Clip":
        bounds = [_tensor((), weight=True, values=[-1.0]), _tensor((), weight=True, values=[1.0])]
        return _node("Clip", [_tensor(x), *bounds])
    if op_type == "LRN":
        return _node(
            "LRN", [_tensor(x)], size=integer(p, "size", 5), alpha=float(p.get("alpha", 1e-4)),
            beta=float(p.get("beta", 0.75)), bias=float(p.get("bias", 1.0)),
        )  # fmt: skip
    if op_type == "Where":
        cond, a, b = tensors.inputs
        return _node("Where", [_tensor(cond, "bool"), _tensor(a), _tensor(b)])
    if op_type in ("Concat", "Split", "Gather"):
        axis = integer(p, "axis", 0) % 4
        if op_type == "Concat":
            return _node("Concat", [_tensor(s) for s in tensors.inputs], axis=axis)
        if op_type == "Split":
            sizes = _tensor((len(tensors.outputs),), "int64", True, [s[axis] for s in tensors.outputs])
            return _node("Split", [_tensor(x), sizes], outputs=len(tensors.outputs), axis=axis)
        return _node("Gather", [_tensor(x, weight=True), _tensor(tensors.inputs[1], "int64")], axis=axis)
    if op_type in ("Slice", "Expand", "Tile"):
        out = tensors.outputs[0]
        if op_type == "Slice":
            consts = [[0] * 4, list(out), [0, 1, 2, 3]]
            return _node("Slice", [_tensor(x), *(_tensor((4,), "int64", True, v) for v in consts)])
        values = list(out) if op_type == "Expand" else [o // i for o, i in zip(out, x, strict=True)]
        return _node(op_type, [_tensor(x), _tensor((4,), "int64", True, values)])
    if op_type == "Transpose":
        return _node("Transpose", [_tensor(x)], perm=_ints(*(integer(p, f"perm_{i}", i) for i in range(4))))
    if op_type in ("ReduceMean", "ReduceSum"):
        axes = [i for i, d in enumerate("NCHW") if integer(p, f"reduce_{d}", 0)]
        return _node(
            op_type, [_tensor(x), _tensor((len(axes),), "int64", True, axes)], keepdims=1,
            noop_with_empty_axes=int(not axes),  # as the torch kernel: no axis, no reduction
        )  # fmt: skip
    if op_type == "Pow" and all(d == 1 for d in tensors.inputs[1]):  # a constant exponent, as the torch kernel
        return _node("Pow", [_tensor(x), _tensor(tensors.inputs[1], weight=True, values=[2.0])])
    # pointwise, broadcasting arithmetic, comparisons, logic, GatherElements: inputs of their kinds
    dtypes = {"float": "float32", "bool": "bool", "index": "int64"}
    inputs = [_tensor(shape, dtypes[kind]) for shape, kind in zip(tensors.inputs, tensors.kinds, strict=True)]
    if op_type == "GatherElements":
        return _node(op_type, inputs, axis=integer(p, "axis", 0) % 4)
    return _node(op_type, inputs)
