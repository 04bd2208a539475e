"""Shape inference: every tensor's shape from ONNX inference with data propagation, a node-by-node folding
pass over shape computations, then onnxruntime's symbolic inference for what is left open."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench.onnx.load import MAX_FOLDED_ELEMENTS

Shape = tuple[int, ...]


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
    """Open tensors that matter: read by a node or a graph output (an unused Dropout mask does not)."""
    used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
    return sum(1 for node in graph.node for out in node.output if out in used and shapes.get(out) is None)


def infer_shapes(
    model: Any, path: Path, notes: list[str], types: dict[str, int] | None = None, symbolic: bool = True
) -> dict[str, Shape | None]:
    """Every tensor's shape: ONNX inference with data propagation; where it leaves shapes open, a sweep
    that folds shape computations (Shape -> Gather -> Concat -> Reshape ...) to values and infers node by
    node with them; then onnxruntime's symbolic inference for whatever is still open. ``types``, when
    given, receives every tensor's ONNX element type that inference found; ``symbolic=False`` leaves out
    the (slow) symbolic pass."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as err:
        notes.append(f"onnx shape inference failed ({err}); inferring node by node")
        inferred = model
    shapes = _value_shapes(inferred.graph)
    if types is not None:
        types.update(element_types(inferred.graph))
    if _open_outputs(inferred.graph, shapes) == 0:
        return shapes
    _fold_and_infer(inferred, shapes, notes)
    if not symbolic or _open_outputs(inferred.graph, shapes) == 0:
        return shapes
    symbolic = _symbolic_shapes(inferred, notes)
    for name, shape in symbolic.items():
        if shapes.get(name) is None and shape is not None:
            shapes[name] = shape
    return shapes


def element_types(graph: Any) -> dict[str, int]:
    types: dict[str, int] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = int(value.type.tensor_type.elem_type)
    for tensor in graph.initializer:
        types[tensor.name] = int(tensor.data_type)
    return types


def small_constant_values(graph: Any, limit: int = MAX_FOLDED_ELEMENTS) -> dict[str, Any]:
    """Constant tensors of at most ``limit`` elements as numpy arrays: initializers and Constant outputs."""
    import numpy as np
    import onnx.numpy_helper

    values: dict[str, Any] = {}
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= limit and tensor.data_location != onnx.TensorProto.EXTERNAL:
            values[tensor.name] = onnx.numpy_helper.to_array(tensor)
    for node in graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for attr in node.attribute:
            if attr.name == "value" and math.prod(attr.t.dims) <= limit:
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
    types = element_types(graph)
    values = small_constant_values(graph)
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
                with np.errstate(all="ignore"):  # log(0) in a mask computation is -inf, as intended
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
