"""ONNX model -> operations: check the model, infer every tensor's shape at a batch size, and describe each
node by the original tool's parameter descriptors (``?`` and flattened attributes for unknown operators)."""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.model import Number, Operation
from dlbench.ops import DESCRIPTORS, operation_cost

log = logging.getLogger(__name__)

Shape = tuple[int, ...]
Params = tuple[tuple[str, Number], ...]

#: Tensor attributes with at most this many elements are flattened into parameters (``value_0``, ...).
MAX_FLATTENED_TENSOR = 16
#: Tensors up to this many elements take part in shape computations (values folded, kept for inference).
MAX_FOLDED_ELEMENTS = 1024
#: Bytes per element of the fixed-size ONNX tensor types (TensorProto.DataType values).
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2}


class ExtractionError(ValueError):
    """A model that cannot be extracted; the message names the file and, where it applies, the node."""


@dataclass(frozen=True)
class NodeRecord:
    """One extracted ONNX node.

    ``input_shapes`` covers every input in order (``None`` for a missing optional input), ``constant``
    says which inputs are weights (initializers, Constant outputs, or computed from those only).
    ``attributes`` keeps every attribute readable (numbers, strings, short tensor summaries);
    ``params`` are the benchmark parameters in descriptor order.
    """

    index: int
    name: str
    op_type: str
    domain: str
    input_shapes: tuple[Shape | None, ...]
    constant: tuple[bool, ...]
    output_shapes: tuple[Shape | None, ...]
    attributes: tuple[tuple[str, Any], ...]
    params: Params

    @property
    def activation_shapes(self) -> tuple[Shape, ...]:
        return tuple(
            s for s, const in zip(self.input_shapes, self.constant, strict=True) if s is not None and not const
        )


@dataclass(frozen=True)
class SkippedNode:
    """A node that was not extracted, and why."""

    index: int
    name: str
    op_type: str
    reason: str


@dataclass(frozen=True)
class Extraction:
    """Everything read from one ONNX file at one batch size."""

    path: str
    model_name: str
    graph_name: str
    opset: int
    ir_version: int
    producer: str
    sha256: str
    batch_size: int
    training: bool
    node_counts: Mapping[str, int]
    nodes: tuple[NodeRecord, ...]
    skipped: tuple[SkippedNode, ...]
    notes: tuple[str, ...] = ()
    constant_nodes: int = 0

    @property
    def total_nodes(self) -> int:
        return sum(self.node_counts.values())

    def operations(self) -> list[Operation]:
        """One operation per extracted node, ids in graph order (see :mod:`dlbench.opdb` to deduplicate)."""
        return [node_operation(i, node) for i, node in enumerate(self.nodes)]


def node_operation(op_id: int, node: NodeRecord) -> Operation:
    """The operation one node stands for, with its cost where the operator is a known one."""
    flops: float | None = None
    moved: float | None = None
    if node.op_type in DESCRIPTORS:
        flops, moved = operation_cost(node.op_type, dict(node.params))
    return Operation(
        id=op_id,
        op_type=node.op_type,
        params=node.params,
        input_shapes=node.activation_shapes,
        count=1,
        nodes=(node.name,),
        flops=flops,
        bytes_moved=moved,
    )


# --------------------------------------------------------------------------------------------- loading


def load_model(path: Path) -> tuple[Any, str]:
    """The parsed ModelProto (external weights not loaded) and the SHA-256 of the file."""
    import onnx
    from google.protobuf.message import DecodeError

    if not path.is_file():
        raise ExtractionError(f"{path}: no such ONNX file")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ExtractionError(f"{path}: not a readable ONNX model (truncated or not ONNX at all): {err}") from err
    if not model.graph.node or not model.opset_import:
        raise ExtractionError(
            f"{path}: not an ONNX model: the file parsed as protobuf but has "
            f"{len(model.graph.node)} nodes and {len(model.opset_import)} opset imports"
        )
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        # Weights kept beside the model: only their shapes matter here, which the model itself holds.
        log.info("%s: external weight data is not loaded (shapes come from the model file)", path)
    return model, digest


def _check_weights(model: Any, path: Path) -> None:
    """Weights the checker no longer sees in the light model: external files exist, raw data is as large
    as the dims say."""
    import onnx

    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if not location or not (path.parent / location).is_file():
                raise ExtractionError(
                    f"{path}: weight {tensor.name!r} is stored in {location!r} beside the model, "
                    "but that file is missing"
                )
        elif tensor.HasField("raw_data"):
            # ByteSize() counts without copying the data out (reading raw_data would copy every weight)
            itemsize = _ITEMSIZE.get(tensor.data_type)
            needed = math.prod(tensor.dims) * itemsize if itemsize else 0
            if tensor.ByteSize() < needed:
                raise ExtractionError(
                    f"{path}: weight {tensor.name!r} holds fewer than the {needed} bytes its dims "
                    f"{list(tensor.dims)} need (a damaged file?)"
                )


def _light_model(model: Any) -> tuple[Any, set[str]]:
    """A copy for checking and shape inference in which large initializers are graph inputs of the same
    type and shape: inference needs only their shapes, and serializing the weights (twice, once per
    C++ call) would dominate the time. Returns the copy and the names of the moved weights."""
    import onnx

    light = onnx.ModelProto()
    light.ir_version = max(int(model.ir_version), 4)  # IR >= 4: initializers need not be inputs
    light.opset_import.extend(model.opset_import)
    light.producer_name = model.producer_name
    light.producer_version = model.producer_version
    light.functions.extend(model.functions)
    graph, source = light.graph, model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.sparse_initializer.extend(source.sparse_initializer)
    inputs = {value.name for value in source.input}
    graph.input.extend(source.input)
    moved: set[str] = set()
    for tensor in source.initializer:
        if math.prod(tensor.dims) <= MAX_FOLDED_ELEMENTS and tensor.data_location != onnx.TensorProto.EXTERNAL:
            graph.initializer.append(tensor)
            continue
        moved.add(tensor.name)
        if tensor.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light, moved


def _check(model: Any, path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        raise ExtractionError(f"{path}: the ONNX checker rejects the model: {first}") from err


def _default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


# --------------------------------------------------------------------------------------- batch size


def _set_batch(
    model: Any, batch_size: int, path: Path, weights: Collection[str] = (), notes: list[str] | None = None
) -> list[str]:
    """Give graph inputs' dynamic first dimension the batch size; returns the symbolic names replaced.

    A first dimension is dynamic when it is a ``dim_param``, unset, or a ``dim_value`` of 0 or -1. When no
    input has one, the model's batch is fixed and must equal ``batch_size``. Other open input dimensions
    stay open (and are reported in ``notes``): the nodes that depend on them cannot be described.
    """
    initializers = {t.name for t in model.graph.initializer} | set(weights)
    inputs = [i for i in model.graph.input if i.name not in initializers and i.type.HasField("tensor_type")]
    ranked = [i for i in inputs if i.type.tensor_type.HasField("shape") and i.type.tensor_type.shape.dim]
    dynamic, fixed = [], []
    for value in ranked:
        for position, other in enumerate(value.type.tensor_type.shape.dim[1:], start=1):
            if notes is not None and not (other.HasField("dim_value") and other.dim_value > 0):
                label = f"{other.dim_param!r}" if other.dim_param else "unnamed"
                notes.append(
                    f"input {value.name!r}: dimension {position} is open ({label}); only the batch dimension is "
                    "set, so nodes whose shapes depend on it cannot be described"
                )
        dim = value.type.tensor_type.shape.dim[0]
        if dim.HasField("dim_value") and dim.dim_value > 0:
            fixed.append((value.name, int(dim.dim_value)))
        else:
            dynamic.append(value)
    if not dynamic:
        mismatched = [(name, size) for name, size in fixed if size != batch_size]
        if mismatched and len(mismatched) == len(fixed):
            name, size = mismatched[0]
            raise ExtractionError(
                f"{path}: input {name!r} has a fixed batch dimension of {size}, so batch_size={batch_size} "
                f"does not fit; use batch_size={size} or export the model with a dynamic batch dimension"
            )
        return []
    names = []
    for value in dynamic:
        dim = value.type.tensor_type.shape.dim[0]
        if dim.HasField("dim_param") and dim.dim_param:
            names.append(dim.dim_param)
        dim.dim_value = batch_size  # clears dim_param (a oneof)
    if names:
        wanted = set(names)
        for value in [*model.graph.value_info, *model.graph.output]:
            if not value.type.HasField("tensor_type"):
                continue
            for d in value.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in wanted:
                    d.dim_value = batch_size
    return names


# -------------------------------------------------------------------------------------------- shapes


def _value_shapes(graph: Any) -> dict[str, Shape | None]:
    """Known shapes by tensor name: a tuple when every dimension is a positive number, else None."""
    shapes: dict[str, Shape | None] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        ttype = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if ttype is None or not ttype.HasField("shape"):
            shapes.setdefault(value.name, None)
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in ttype.shape.dim]
        known = None if any(d is None for d in dims) else tuple(int(d) for d in dims)
        if shapes.get(value.name) is None:
            shapes[value.name] = known
    for tensor in graph.initializer:
        shapes[tensor.name] = tuple(int(d) for d in tensor.dims)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    shapes[node.output[0]] = tuple(int(d) for d in attr.t.dims)
                elif attr.name in ("value_float", "value_int"):
                    shapes[node.output[0]] = ()
                elif attr.name in ("value_floats", "value_ints"):
                    shapes[node.output[0]] = (len(attr.floats) or len(attr.ints),)
    return shapes


def _open_outputs(graph: Any, shapes: Mapping[str, Shape | None]) -> int:
    return sum(1 for node in graph.node for out in node.output if out and shapes.get(out) is None)


def _infer_shapes(model: Any, path: Path, notes: list[str]) -> dict[str, Shape | None]:
    """Every tensor's shape: ONNX inference with data propagation; where it leaves shapes open, a sweep
    that folds shape computations (Shape -> Gather -> Concat -> Reshape ...) to values and infers node by
    node with them; then onnxruntime's symbolic inference for whatever is still open."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as err:
        notes.append(f"onnx shape inference failed ({err}); inferring node by node")
        inferred = model
    shapes = _value_shapes(inferred.graph)
    if _open_outputs(inferred.graph, shapes) == 0:
        return shapes
    _fold_and_infer(inferred, shapes, notes)
    if _open_outputs(inferred.graph, shapes) == 0:
        return shapes
    symbolic = _symbolic_shapes(inferred, notes)
    for name, shape in symbolic.items():
        if shapes.get(name) is None and shape is not None:
            shapes[name] = shape
    return shapes


def _elem_types(graph: Any) -> dict[str, int]:
    types: dict[str, int] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = int(value.type.tensor_type.elem_type)
    for tensor in graph.initializer:
        types[tensor.name] = int(tensor.data_type)
    return types


def _constant_values(graph: Any) -> dict[str, Any]:
    """Small constant tensors as numpy arrays: initializers and Constant outputs."""
    import numpy as np
    import onnx.numpy_helper

    values: dict[str, Any] = {}
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= MAX_FOLDED_ELEMENTS:
            values[tensor.name] = onnx.numpy_helper.to_array(tensor)
    for node in graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for attr in node.attribute:
            if attr.name == "value" and math.prod(attr.t.dims) <= MAX_FOLDED_ELEMENTS:
                values[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
            elif attr.name == "value_int":
                values[node.output[0]] = np.array(attr.i, dtype=np.int64)
            elif attr.name == "value_ints":
                values[node.output[0]] = np.array(list(attr.ints), dtype=np.int64)
            elif attr.name == "value_float":
                values[node.output[0]] = np.array(attr.f, dtype=np.float32)
            elif attr.name == "value_floats":
                values[node.output[0]] = np.array(list(attr.floats), dtype=np.float32)
    return values


def _evaluate_small(node: Any, inputs: list[Any], opset: int) -> list[Any]:
    """Run one node on small constant inputs: numpy for the usual shape arithmetic, ONNX's reference
    evaluator for anything else."""
    import numpy as np

    op = node.op_type
    attrs = {a.name: onnx_attribute_value(a) for a in node.attribute}
    if op == "Identity":
        return [inputs[0]]
    if op == "Gather":
        return [np.take(inputs[0], inputs[1], axis=int(attrs.get("axis", 0)))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(x) for x in inputs], axis=int(attrs["axis"]))]
    if op in ("Add", "Sub", "Mul") and inputs[0].dtype.kind in "iu" and inputs[1].dtype.kind in "iu":
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        return [fn(inputs[0], inputs[1]).astype(inputs[0].dtype)]
    if op == "Unsqueeze" and opset >= 13 and len(inputs) == 2:
        out = inputs[0]
        rank = out.ndim + inputs[1].size
        for axis in sorted(int(a) % rank for a in np.atleast_1d(inputs[1])):
            out = np.expand_dims(out, axis)
        return [out]
    if op == "Squeeze" and opset >= 13:
        if len(inputs) == 1:
            return [np.squeeze(inputs[0])]
        return [np.squeeze(inputs[0], axis=tuple(int(a) for a in np.atleast_1d(inputs[1])))]
    if op == "Reshape" and not attrs.get("allowzero", 0):
        target = [int(d) for d in inputs[1]]
        target = [inputs[0].shape[i] if d == 0 else d for i, d in enumerate(target)]
        return [np.reshape(inputs[0], target)]
    from onnx.reference import ReferenceEvaluator

    names = [i for i in node.input if i]
    return list(ReferenceEvaluator(node).run(None, dict(zip(names, inputs, strict=True))))


def onnx_attribute_value(attr: Any) -> Any:
    import onnx.helper

    return onnx.helper.get_attribute_value(attr)


def _fold_and_infer(model: Any, shapes: dict[str, Shape | None], notes: list[str]) -> None:
    """One topological sweep: fold small shape computations to values, and infer the outputs the global
    inference left open node by node, with those values as input data (so Reshape targets computed from
    Shape/Slice/Div chains resolve)."""
    import numpy as np
    import onnx
    import onnx.numpy_helper

    graph = model.graph
    opsets = {imp.domain or "": int(imp.version) for imp in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx", 0))
    types = _elem_types(graph)
    values = _constant_values(graph)
    failures = 0
    for node in graph.node:
        ins = [i for i in node.input if i]
        outs = [o for o in node.output if o]
        result = None
        if node.domain not in ("", "ai.onnx"):
            pass
        elif node.op_type == "Shape" and ins and shapes.get(ins[0]) is not None:
            attrs = {a.name: a.i for a in node.attribute}
            full = shapes[ins[0]]
            start, end = attrs.get("start", 0), attrs.get("end", len(full))
            result = [np.array(full[start:end], dtype=np.int64)]
        elif node.op_type == "Size" and ins and shapes.get(ins[0]) is not None:
            result = [np.array(math.prod(shapes[ins[0]]), dtype=np.int64)]
        elif node.op_type != "Constant" and ins and all(i in values for i in ins):
            try:
                result = _evaluate_small(node, [values[i] for i in node.input if i], opset)
            except Exception:  # noqa: BLE001 - a node we cannot fold simply stays symbolic
                result = None
        if result is not None:
            for name, value in zip(node.output, result, strict=False):
                array = np.asarray(value)
                if name and array.size <= MAX_FOLDED_ELEMENTS:
                    values[name] = array
                    if shapes.get(name) is None:
                        shapes[name] = tuple(int(d) for d in array.shape)
        if not outs or all(shapes.get(o) is not None for o in outs):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(node.domain or "", opset), node.domain)
        except onnx.defs.SchemaError:
            continue
        input_types = {}
        for name in ins:
            if name not in types:
                break
            shape = shapes.get(name)
            input_types[name] = onnx.helper.make_tensor_type_proto(
                types[name], list(shape) if shape is not None else None
            )
        else:
            input_data = {n: onnx.numpy_helper.from_array(values[n], n) for n in ins if n in values}
            try:
                inferred = onnx.shape_inference.infer_node_outputs(
                    schema, node, input_types, input_data, list(model.opset_import)
                )
            except Exception:  # noqa: BLE001 - inference errors leave the outputs open; counted below
                failures += 1
                continue
            for name, type_proto in inferred.items():
                if not type_proto.HasField("tensor_type"):
                    continue
                tensor_type = type_proto.tensor_type
                if tensor_type.elem_type:
                    types[name] = int(tensor_type.elem_type)
                if tensor_type.HasField("shape") and all(
                    d.HasField("dim_value") and d.dim_value > 0 for d in tensor_type.shape.dim
                ):
                    shapes[name] = tuple(int(d.dim_value) for d in tensor_type.shape.dim)
    if failures:
        notes.append(f"node-by-node inference failed for {failures} nodes")


def _symbolic_shapes(model: Any, notes: list[str]) -> dict[str, Shape | None]:
    """Shapes from onnxruntime's symbolic inference, for the dimensions ONNX's own inference left open.

    Its ``infer_shapes`` writes ``sym_shape_infer_temp.onnx`` and weight files into the working directory
    whenever it cannot infer everything, and then returns nothing; so its steps are run here directly,
    which also keeps the shapes it did infer (or, should those internals change, the public call runs in
    a temporary directory)."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        notes.append("onnxruntime is not installed: no symbolic shape inference for open dimensions")
        return {}
    try:
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        if all(hasattr(inference, a) for a in ("_preprocess", "_infer_impl", "_update_output_from_vi")):
            inference._preprocess(model)
            complete = False
            while inference.run_:
                complete = inference._infer_impl()
            inference._update_output_from_vi()
            result = inference.out_mp_
            if not complete:
                notes.append("symbolic shape inference left some shapes open")
        else:
            result = _symbolic_in_scratch_directory(SymbolicShapeInference, model)
    except Exception as err:  # noqa: BLE001 - any failure in the third-party pass just leaves dims open
        notes.append(f"symbolic shape inference failed: {type(err).__name__}: {err}")
        return {}
    if result is None:
        notes.append("symbolic shape inference could not run (opset below 7)")
        return {}
    return _value_shapes(result.graph)


def _symbolic_in_scratch_directory(inference: Any, model: Any) -> Any:
    import os
    import tempfile

    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="dlbench_symbolic_") as scratch:
        os.chdir(scratch)
        try:
            return inference.infer_shapes(model, auto_merge=True, guess_output_rank=False)
        finally:
            os.chdir(previous)


# ----------------------------------------------------------------------------------------- attributes


class _UnhandledAttribute(Exception):
    pass


def _tensor_values(tensor: Any) -> list[Number] | None:
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


def _tensor_summary(tensor: Any) -> str:
    import onnx

    dtype = onnx.TensorProto.DataType.Name(tensor.data_type).lower()
    return f"tensor {dtype}[{','.join(str(d) for d in tensor.dims)}]"


def _float32(value: float) -> float:
    """An attribute float (stored as float32) as the shortest decimal that reads back to it: 1e-05, not
    9.999999747378752e-06."""
    import numpy as np

    return float(str(np.float32(value)))


def _read_attributes(node: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Number]]]:
    """Every attribute as a readable value, plus the numeric ones flattened as parameters (``name``,
    ``name_i``). Raises :class:`_UnhandledAttribute` for types that have no meaning as a benchmark
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
            values = _tensor_values(attr.t)
            if values is None:
                readable.append((name, _tensor_summary(attr.t)))
            else:
                readable.append((name, values))
                params.extend((f"{name}_{i}", v) for i, v in enumerate(values))
        elif kind == kinds.TENSORS:
            readable.append((name, [_tensor_summary(t) for t in attr.tensors]))
        elif kind == kinds.SPARSE_TENSOR:
            sparse = attr.sparse_tensor
            readable.append((name, f"sparse {_tensor_summary(sparse.values)} of dims {list(sparse.dims)}"))
        elif kind == kinds.SPARSE_TENSORS:
            readable.append((name, [f"sparse tensor of dims {list(s.dims)}" for s in attr.sparse_tensors]))
        elif kind in (kinds.GRAPH, kinds.GRAPHS):
            raise _UnhandledAttribute(
                f"attribute {name!r} is a subgraph ({kinds.AttributeType.Name(kind)}); control-flow "
                "bodies are not extracted"
            )
        else:
            type_name = kinds.AttributeType.Name(kind) if kind in kinds.AttributeType.values() else str(kind)
            raise _UnhandledAttribute(
                f"attribute {name!r} has type {type_name}, which dlbench does not extract "
                "(handled: FLOAT(S), INT(S), STRING(S), TENSOR(S), SPARSE_TENSOR(S); GRAPH(S) are reported)"
            )
    return readable, params


# ----------------------------------------------------------------------------------- known operators


class _CannotDescribe(Exception):
    pass


class _NoCanonicalForm(Exception):
    """A known operator in a form the canonical descriptors do not cover (e.g. a 3-D convolution): it is
    described like an unknown operator instead."""


def _nchw(shape: Shape) -> Shape:
    """Rank 4 for elementwise operators: leading 1s for lower ranks, leading dims folded into N above."""
    if len(shape) <= 4:
        return (1,) * (4 - len(shape)) + tuple(shape)
    return (math.prod(shape[: len(shape) - 3]), *shape[-3:])


def _spatial(shape: Shape) -> Shape:
    """Rank 4 for operators with a batch and a channel axis: N, C, then H and W (1-D: H=1; 3-D+: W folds
    the remaining spatial dims)."""
    if len(shape) < 2:
        raise _CannotDescribe(f"expected an (N, C, ...) input, got shape {list(shape)}")
    n, c, rest = shape[0], shape[1], shape[2:]
    if not rest:
        return (n, c, 1, 1)
    if len(rest) == 1:
        return (n, c, 1, rest[0])
    return (n, c, rest[0], math.prod(rest[1:]))


def _axis4(axis: int, rank: int) -> int:
    axis = axis % rank if rank else 0
    if rank <= 4:
        return axis + 4 - rank
    return max(0, axis - (rank - 4))


def _window(
    attrs: Mapping[str, Any], spatial_in: Sequence[int], kernel: Sequence[int], where: str
) -> tuple[list[int], list[int], list[int]]:
    """Pads (ONNX order begin..., end...), strides and dilations for a 1-D or 2-D window, ``auto_pad``
    resolved to explicit pads."""
    rank = len(kernel)
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    pads = list(attrs.get("pads") or [0] * (2 * rank))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * rank)
        for i in range(rank):
            out = -(-spatial_in[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial_in[i])
            small, large = total // 2, total - total // 2
            pads[i], pads[i + rank] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * rank)
    elif auto_pad != "NOTSET":
        raise _CannotDescribe(f"{where}: auto_pad={auto_pad!r} is not an ONNX value")
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise _CannotDescribe(f"{where}: strides/dilations/pads do not match a {rank}-D window")
    return pads, strides, dilations


def _window_2d(values: Sequence[int], rank: int, fill: int) -> list[int]:
    """A 1-D window's values as 2-D ones with H as the unit dimension."""
    return [fill, *values] if rank == 1 else list(values)


def _conv(shapes: Sequence[Shape | None], attrs: Mapping[str, Any], mode: int) -> Params:
    x, w = shapes[0], shapes[1]
    if x is None or w is None:
        raise _CannotDescribe("input or weight shape unknown")
    if len(x) not in (3, 4):
        raise _NoCanonicalForm(f"only 1-D and 2-D convolutions have canonical descriptors, input {list(x)}")
    kernel = list(attrs.get("kernel_shape") or w[2:])
    rank = len(kernel)
    pads, strides, dilations = _window(attrs, x[2:], kernel, "Conv")
    n, c, h, wd = _spatial(x)
    if rank == 1:
        pads = [0, pads[0], 0, pads[1]]
    values = [
        n,
        c,
        h,
        wd,
        int(w[0]),
        *_window_2d(kernel, rank, 1),
        *pads,
        *_window_2d(strides, rank, 1),
        *_window_2d(dilations, rank, 1),
        int(attrs.get("group", 1)),
        mode,
    ]
    return tuple(zip(DESCRIPTORS["Conv"], (int(v) for v in values), strict=True))


def _pool(shapes: Sequence[Shape | None], attrs: Mapping[str, Any], op_type: str) -> Params:
    x = shapes[0]
    if x is None:
        raise _CannotDescribe("input shape unknown")
    if len(x) not in (3, 4):
        raise _NoCanonicalForm(f"only 1-D and 2-D pooling has canonical descriptors, input {list(x)}")
    kernel = list(attrs.get("kernel_shape") or [])
    if len(kernel) != len(x) - 2:
        raise _CannotDescribe(f"{op_type}: kernel_shape {kernel} does not fit input {list(x)}")
    rank = len(kernel)
    pads, strides, _ = _window(attrs, x[2:], kernel, op_type)
    if rank == 1:
        pads = [0, pads[0], 0, pads[1]]
    values = [*_spatial(x), *_window_2d(kernel, rank, 1), *pads, *_window_2d(strides, rank, 1), 0]
    return tuple(zip(DESCRIPTORS[op_type], (int(v) for v in values), strict=True))


def _gemm(shapes: Sequence[Shape | None], attrs: Mapping[str, Any]) -> Params:
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        raise _CannotDescribe("Gemm needs two 2-D inputs of known shape")
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    m, k = (a[1], a[0]) if trans_a else a
    n = b[0] if trans_b else b[1]
    return tuple(zip(DESCRIPTORS["Gemm"], (int(m), int(k), int(n), trans_a, trans_b, 1), strict=True))


def _matmul(shapes: Sequence[Shape | None]) -> Params:
    """MatMul as one (strided-batched) GEMM. When only A has leading dimensions (a weight B), they fold into
    M, as frameworks run it; when both have them, ``batch`` is the product of the broadcast leading dims."""
    a, b = shapes[0], shapes[1]
    if a is None or b is None or not a or not b:
        raise _CannotDescribe("MatMul needs two inputs of known, non-scalar shape")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    lead_a, lead_b = a2[:-2], b2[:-2]
    if not lead_b:
        m, batch = m * math.prod(lead_a), 1
    else:
        width = max(len(lead_a), len(lead_b))
        pa = (1,) * (width - len(lead_a)) + tuple(lead_a)
        pb = (1,) * (width - len(lead_b)) + tuple(lead_b)
        batch = math.prod(max(x, y) for x, y in zip(pa, pb, strict=True))
    return tuple(zip(DESCRIPTORS["MatMul"], (int(m), int(k), int(n), 0, 0, int(batch)), strict=True))


def _describe_known(
    op_type: str, shapes: Sequence[Shape | None], attrs: Mapping[str, Any], opset: int, training: bool
) -> Params | None:
    """Canonical parameters of a known operator, or None when the op_type has none."""
    first = shapes[0] if shapes else None
    if op_type == "Conv":
        return _conv(shapes, attrs, mode=0)
    if op_type in ("MaxPool", "AveragePool"):
        return _pool(shapes, attrs, op_type)
    if op_type == "Gemm":
        return _gemm(shapes, attrs)
    if op_type == "MatMul":
        return _matmul(shapes)
    if op_type not in DESCRIPTORS:
        return None
    if first is None:
        raise _CannotDescribe("input shape unknown")
    if op_type == "BatchNormalization":
        train = training or bool(attrs.get("training_mode", 0))
        values = (
            *_spatial(first),
            float(attrs.get("epsilon", 1e-5)),
            float(attrs.get("momentum", 0.9)),
            0 if train else 2,
        )
    elif op_type in ("Relu",):
        values = (*_nchw(first), 0)
    elif op_type == "GlobalAveragePool":
        values = (*_spatial(first), 0)
    elif op_type == "Add":
        second = shapes[1] if len(shapes) > 1 else None
        if second is None:
            raise _CannotDescribe("second input shape unknown")
        values = (*_nchw(first), *_nchw(second))
    elif op_type == "Softmax":
        axis = int(attrs.get("axis", -1 if opset >= 13 else 1))
        values = (*_nchw(first), _axis4(axis, len(first)), 0)
    elif op_type == "LayerNormalization":
        axis = int(attrs.get("axis", -1))
        values = (*_nchw(first), _axis4(axis, len(first)), float(attrs.get("epsilon", 1e-5)), 0)
    else:  # an op_type added to ops.DESCRIPTORS that this module does not know yet
        return None
    return tuple(zip(DESCRIPTORS[op_type], values, strict=True))


def _describe_unknown(shapes: Sequence[Shape | None], names: Sequence[str], flat_attrs: Params) -> Params:
    params: list[tuple[str, Number]] = []
    for name, shape in zip(names, shapes, strict=True):
        if not name:
            continue
        if shape is None:
            raise _CannotDescribe(f"shape of input {name!r} unknown")
        params.extend(("?", int(d)) for d in shape)
    return (*params, *flat_attrs)


# ------------------------------------------------------------------------------------------ extraction


def _constant_names(graph: Any) -> set[str]:
    constants = {t.name for t in graph.initializer}
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type == "Constant" or (inputs and all(i in constants for i in inputs)):
            constants.update(o for o in node.output if o)
    return constants


def extract_operations(
    path: str | Path,
    batch_size: int,
    training: bool = True,
    strict: bool = False,
) -> Extraction:
    """Read ``path`` and describe every node at ``batch_size``.

    ``training``: the network is evaluated for training, so BatchNormalization forward uses batch
    statistics (mode 0); otherwise inference (mode 2). Nodes whose shapes stay unknown or whose attributes
    cannot be read are listed in ``Extraction.skipped``; ``strict`` raises :class:`ExtractionError` instead.
    Constant nodes are weights, not operations: they are counted but not extracted.
    """
    import onnx

    path = Path(path)
    if batch_size < 1:
        raise ExtractionError(f"{path}: batch_size must be >= 1, got {batch_size}")
    model, digest = load_model(path)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    _check_weights(model, path)
    light, weights = _light_model(model)
    _check(light, path)
    opset = _default_opset(model)
    notes: list[str] = []
    _set_batch(light, batch_size, path, weights, notes)
    shapes = _infer_shapes(light, path, notes)
    graph = model.graph
    constants = _constant_names(graph)

    records: list[NodeRecord] = []
    skipped: list[SkippedNode] = []
    counts: Counter[str] = Counter()
    constant_nodes = 0
    for index, node in enumerate(graph.node):
        counts[node.op_type] += 1
        if node.op_type == "Constant" and not node.domain:
            constant_nodes += 1
            continue
        name = node.name or f"{node.op_type}_{index}"
        in_shapes = tuple(shapes.get(i) if i else None for i in node.input)
        try:
            unknown = [i for i, shape in zip(node.input, in_shapes, strict=True) if i and shape is None]
            if unknown:
                raise _CannotDescribe(
                    f"shape of input {', '.join(map(repr, unknown))} unknown: neither ONNX nor symbolic shape "
                    "inference could infer it"
                )
            readable, flat_attrs = _read_attributes(node)
            attrs = dict(readable)
            params = None
            if node.domain in ("", "ai.onnx"):
                try:
                    params = _describe_known(node.op_type, in_shapes, attrs, opset, training)
                except _NoCanonicalForm as err:
                    notes.append(f"node {name!r} ({node.op_type}): {err}; described by position")
            if params is None:
                params = _describe_unknown(in_shapes, list(node.input), tuple(flat_attrs))
        except (_UnhandledAttribute, _CannotDescribe) as err:
            reason = f"{path}: node {name!r} ({node.op_type}): {err}"
            if strict:
                raise ExtractionError(reason) from None
            skipped.append(SkippedNode(index=index, name=name, op_type=node.op_type, reason=reason))
            continue
        records.append(
            NodeRecord(
                index=index,
                name=name,
                op_type=node.op_type,
                domain=node.domain,
                input_shapes=in_shapes,
                constant=tuple(bool(i) and i in constants for i in node.input),
                output_shapes=tuple(shapes.get(o) if o else None for o in node.output),
                attributes=tuple(readable),
                params=params,
            )
        )
    if skipped:
        log.warning("%s: %d of %d nodes skipped", path, len(skipped), len(graph.node))
    return Extraction(
        path=str(path),
        model_name=path.stem,
        graph_name=graph.name,
        opset=opset,
        ir_version=int(model.ir_version),
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        sha256=digest,
        batch_size=batch_size,
        training=training,
        node_counts=dict(counts.most_common()),
        nodes=tuple(records),
        skipped=tuple(skipped),
        notes=tuple(notes),
        constant_nodes=constant_nodes,
    )


__all__ = [
    "Extraction",
    "ExtractionError",
    "NodeRecord",
    "SkippedNode",
    "extract_operations",
    "load_model",
    "node_operation",
]
