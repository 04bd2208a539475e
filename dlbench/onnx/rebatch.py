"""Re-batching a model whose batch is fixed: the batch inputs get the new size, the shape constants of
Reshape/Expand that carry the batch are rewritten, and then every node's inferred shapes are checked against
the shapes at the model's own batch. Each activation tensor must keep its shape or have exactly one
dimension scaled by new/old batch; a node whose inputs scale while an output does not, or any other change,
stops the extraction naming the node and its shape constant. Never an operation with a wrong shape."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.onnx.classes import constant_outputs
from dlbench.onnx.dims import set_dimensions
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.infer import Shape, infer_shapes
from dlbench.onnx.load import light_model, load_model

#: Ops whose output is a tensor's metadata: it keeps its shape while the batch changes its values.
SHAPE_READERS = frozenset({"Shape", "Size"})
#: Outputs that are per-channel statistics and keep their shape whatever the batch (by op type, index).
STATISTICS = {"BatchNormalization": frozenset({1, 2, 3, 4})}
#: Ops whose shape input is rewritten when it carries the batch (Tile repeats and ConstantOfShape shapes
#: on the activation path are computed from the data, so they follow by themselves).
REWRITTEN = frozenset({"Reshape", "Expand"})


@dataclass(frozen=True)
class ShapeRewrite:
    """One rewritten shape constant: node ``node`` (graph index ``index``) reads ``tensor`` = ``new``
    instead of ``old`` at input 1."""

    index: int
    node: str
    tensor: str
    old: tuple[int, ...]
    new: tuple[int, ...]


@dataclass(frozen=True)
class _Problem:
    index: int
    message: str
    axis: int | None = None  # a Reshape's output dimension that must carry the batch


def _status(ref: Shape | None, new: Shape | None, old_batch: int, new_batch: int) -> tuple[str, int]:
    """('unknown' | 'open' | 'same' | 'scaled' | 'wrong', scaled axis)."""
    if ref is None:
        return "unknown", -1
    if new is None:
        return "open", -1
    if new == ref:
        return "same", -1
    if len(new) != len(ref):
        return "wrong", -1
    changed = [a for a, (x, y) in enumerate(zip(ref, new, strict=True)) if x != y]
    if len(changed) == 1 and new[changed[0]] * old_batch == ref[changed[0]] * new_batch:
        return "scaled", changed[0]
    return "wrong", -1


def _reshaped_batch_axis(stride: int, old_batch: int, ref_out: Shape) -> int | None:
    """The output dimension of a Reshape that holds the batch. Row-major, one batch step is ``stride``
    elements apart whatever the shape: the batch lies in dimension j when the dimensions after j cover a
    divisor of the stride and those from j on a multiple of stride x batch (so ``[seq, batch, d] ->
    [seq * batch, d]`` and ``[batch * heads, s, d] -> [batch, heads, s, d]`` both follow). The outermost such
    j where unit dimensions tie; None when the batch would be split across dimensions."""
    for j in range(len(ref_out)):
        if stride % math.prod(ref_out[j + 1 :]) == 0 and math.prod(ref_out[j:]) % (stride * old_batch) == 0:
            return j
    return None


def _literal(graph: Any, name: str) -> tuple[int, ...] | None:
    """The values of a shape constant stored in the model (initializer or Constant node), else None."""
    import onnx.numpy_helper

    for tensor in graph.initializer:
        if tensor.name == name:
            return tuple(int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1))
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return tuple(int(v) for v in onnx.numpy_helper.to_array(attr.t).reshape(-1))
                if attr.name == "value_ints":
                    return tuple(int(v) for v in attr.ints)
    return None


def _show(shape: Shape | None) -> str:
    return "unknown" if shape is None else str(list(shape))


def _first_problem(
    graph: Any,
    constant_nodes: set[int],
    constants: set[str],
    ref: Mapping[str, Shape | None],
    new: Mapping[str, Shape | None],
    old_batch: int,
    new_batch: int,
) -> _Problem | None:
    """The first node (graph order) whose shapes do not follow the batch. Along the way each scaled tensor's
    ``inner`` factor is tracked: how many elements of its batch dimension one batch step spans (1 unless a
    Reshape merged the batch with dimensions after it, e.g. batch x heads)."""
    inner: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        if index in constant_nodes:
            continue
        name = node.name or f"{node.op_type}_{index}"
        ins = [i for i in node.input if i and i not in constants]
        outs = [o for o in node.output if o]
        statuses = {t: _status(ref.get(t), new.get(t), old_batch, new_batch) for t in [*ins, *outs]}
        for tensor, (status, _) in statuses.items():
            if status in ("open", "wrong"):
                return _Problem(
                    index,
                    f"node {name!r} ({node.op_type}): tensor {tensor!r} has shape {_show(new.get(tensor))} at batch "
                    f"{new_batch} where batch {old_batch} gives {_show(ref.get(tensor))}, which is not the batch "
                    "dimension scaled",
                )
        scaled_in = [t for t in ins if statuses[t][0] == "scaled"]
        statistics = STATISTICS.get(node.op_type, frozenset())
        same_out = [t for k, t in enumerate(node.output) if t and k not in statistics and statuses[t][0] == "same"]
        factor = inner.get(scaled_in[0], 1) if scaled_in else 1
        reshaping = node.op_type == "Reshape" and scaled_in and scaled_in[0] == node.input[0] and outs
        if reshaping and statuses[outs[0]][0] != "unknown":
            ref_in, axis = ref[node.input[0]], statuses[node.input[0]][1]
            assert ref_in is not None  # scaled implies known
            stride = factor * math.prod(ref_in[axis + 1 :])
            expected = _reshaped_batch_axis(stride, old_batch, ref[outs[0]] or ())
            status, out_axis = statuses[outs[0]]
            if expected is None or status != "scaled" or out_axis != expected:
                where = "is split across dimensions" if expected is None else f"belongs in dimension {expected}"
                return _Problem(
                    index,
                    f"node {name!r} (Reshape): the batch of input {node.input[0]!r} ({_show(ref_in)} -> "
                    f"{_show(new.get(node.input[0]))}) {where} of the output, which is {_show(new.get(outs[0]))}",
                    expected,
                )
            inner[outs[0]] = stride // math.prod((ref[outs[0]] or ())[expected + 1 :])
            continue
        if scaled_in and same_out and node.op_type not in SHAPE_READERS:
            return _Problem(
                index,
                f"node {name!r} ({node.op_type}): input {scaled_in[0]!r} changes with the batch "
                f"({_show(ref.get(scaled_in[0]))} -> {_show(new.get(scaled_in[0]))}) but output {same_out[0]!r} "
                f"keeps shape {_show(new.get(same_out[0]))}",
            )
        for out in outs:
            if statuses[out][0] == "scaled":
                inner[out] = factor
    return None


def _fixed_shape(
    node: Any,
    graph: Any,
    problem: _Problem,
    ref: Mapping[str, Shape | None],
    new: Mapping[str, Shape | None],
    old_batch: int,
    new_batch: int,
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(old, new) values of the node's shape constant so that it carries the batch, or None when no entry
    of it provably does."""
    if node.op_type not in REWRITTEN or len(node.input) < 2:
        return None
    values = _literal(graph, node.input[1])
    ref_in, new_in, ref_out = ref.get(node.input[0]), new.get(node.input[0]), ref.get(node.output[0])
    if values is None or ref_in is None or ref_out is None or len(values) != len(ref_out):
        return None
    status, axis = _status(ref_in, new_in, old_batch, new_batch)
    if status != "scaled":
        return None
    # Reshape: the dimension the batch belongs in; Expand: broadcasting aligns dimensions from the right
    j = problem.axis if node.op_type == "Reshape" else axis + len(ref_out) - len(ref_in)
    if j is None or j < 0 or values[j] <= 0 or (ref_out[j] * new_batch) % old_batch:
        return None
    if node.op_type == "Expand" and (values[j] == 1 or values[j] != ref_out[j]):
        return None
    target = list(values)
    target[j] = ref_out[j] * new_batch // old_batch
    return (values, tuple(target)) if tuple(target) != values else None


def apply_rewrite(model: Any, rewrite: ShapeRewrite) -> None:
    """Point the node at a new initializer holding the rewritten constant (the old one may be shared)."""
    import numpy as np
    import onnx.numpy_helper

    node = model.graph.node[rewrite.index]
    name = f"{rewrite.tensor}__batch_{'_'.join(str(v) for v in rewrite.new)}"
    if not any(t.name == name for t in model.graph.initializer):
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(rewrite.new, dtype=np.int64), name))
    node.input[1] = name


def set_input_batch(model: Any, inputs: Sequence[str], batch: int) -> None:
    """Batch inputs get ``batch``; inferred shapes stored in the file (value_info, outputs) are dropped."""
    for value in model.graph.input:
        if value.name in inputs:
            value.type.tensor_type.shape.dim[0].dim_value = batch
    del model.graph.value_info[:]
    for value in model.graph.output:
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")


def rebatch(
    light: Any,
    path: Path,
    batch_inputs: Sequence[str],
    old_batch: int,
    new_batch: int,
    notes: list[str],
    weights: Collection[str] = (),
    types: dict[str, int] | None = None,
) -> tuple[dict[str, Shape | None], tuple[ShapeRewrite, ...]]:
    """Every tensor's shape at ``new_batch`` for a model fixed at ``old_batch`` (``light`` is changed in
    place), with the shape constants rewritten; raises :class:`ExtractionError` where consistency cannot be
    shown."""
    import onnx

    reference = onnx.ModelProto()
    reference.CopyFrom(light)
    ref = infer_shapes(reference, path, [])
    set_input_batch(light, batch_inputs, new_batch)
    constants, constant_nodes = constant_outputs(light.graph, weights)
    rewrites: list[ShapeRewrite] = []
    limit = sum(1 for n in light.graph.node if n.op_type in REWRITTEN) + 1
    hint = f"use batch_size={old_batch}, or export the model with a dynamic batch dimension"
    for _ in range(limit):
        # quick passes while constants are being fixed; the full inference (and its notes) once they agree
        shapes = infer_shapes(light, path, [], types, symbolic=False)
        problem = _first_problem(light.graph, constant_nodes, constants, ref, shapes, old_batch, new_batch)
        if problem is None:
            shapes = infer_shapes(light, path, notes, types)
            problem = _first_problem(light.graph, constant_nodes, constants, ref, shapes, old_batch, new_batch)
        if problem is None:
            if rewrites:
                notes.append(
                    f"batch fixed at {old_batch} in the model, set to {new_batch}: {len(rewrites)} shape constant(s) "
                    "rewritten ("
                    + ", ".join(f"{r.node}: {list(r.old)} -> {list(r.new)}" for r in rewrites[:5])
                    + (", ..." if len(rewrites) > 5 else "")
                    + "); every node's shapes checked"
                )
            return shapes, tuple(rewrites)
        node = light.graph.node[problem.index]
        fixed = _fixed_shape(node, light.graph, problem, ref, shapes, old_batch, new_batch)
        if fixed is None:
            constant = ""
            if len(node.input) > 1 and node.op_type in (*REWRITTEN, "Tile", "ConstantOfShape"):
                values = _literal(light.graph, node.input[1])
                if values is not None:
                    constant = (
                        f"; its shape constant {node.input[1]!r} = {list(values)} does not provably carry the batch"
                    )
            raise ExtractionError(
                f"{path}: the batch is fixed at {old_batch} and changing it to {new_batch} cannot be shown "
                f"consistent: {problem.message}{constant}; {hint}"
            )
        name = node.name or f"{node.op_type}_{problem.index}"
        rewrite = ShapeRewrite(problem.index, name, node.input[1], fixed[0], fixed[1])
        apply_rewrite(light, rewrite)
        rewrites.append(rewrite)
    raise ExtractionError(f"{path}: re-batching from {old_batch} to {new_batch} did not settle; {hint}")


def rebatched_model(path: Path, batch_size: int, dims: Mapping[str, int] | None = None) -> Any:
    """The whole model (weights included) at ``batch_size`` and ``dims``, as extraction sees it: dynamic
    dimensions set, a fixed batch changed with the same rewritten shape constants. For running the model
    elsewhere (onnxruntime, the torch engine): weights kept beside the file (torch.onnx.export's default
    exporter writes them so) are read into it."""
    model, _ = load_model(path)
    _read_external_weights(model, path)
    light, weights = light_model(model)
    dimensions = set_dimensions(light, batch_size, dims or {}, path, weights)
    set_dimensions(model, batch_size, dims or {}, path)
    if dimensions.fixed_batch is not None:
        _, rewrites = rebatch(light, path, dimensions.batch_inputs, dimensions.fixed_batch, batch_size, [], weights)
        set_input_batch(model, dimensions.batch_inputs, batch_size)
        for rewrite in rewrites:
            apply_rewrite(model, rewrite)
    return model


def _read_external_weights(model: Any, path: Path) -> None:
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError) as err:
            raise ExtractionError(f"{path}: its weights kept beside it cannot be read: {err}") from err
