"""A network's training step as operations: its forward operations and their unfolded backward passes, adjusted
by what the ONNX graph says (which inputs need gradients, fused bias additions), plus the loss and the
optimizer update."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.dtypes import DTYPE_BYTES, ELEMENT_TYPES, FLOAT_TYPES
from dlbench.core.glue import carries_gradient
from dlbench.core.shapes import rank4
from dlbench.core.values import Operation
from dlbench.onnx.unfold import declared_notes
from dlbench.onnx.update import StepRun, loss_operations, update_operations

#: TensorProto numbers of the float element types: the initializers that are trainable parameters
FLOAT_ELEMENT_TYPES = frozenset(ELEMENT_TYPES[name] for name in FLOAT_TYPES)


LOSS_PASSES = ("loss_forward", "loss_backward")


OPTIMIZER_PASS = "optimizer"


@dataclass(frozen=True)
class GraphFacts:
    """What the ONNX graph says about training that the operation list does not."""

    node_inputs: Mapping[str, tuple[str, ...]]
    requires_grad: frozenset[str]
    producers: Mapping[str, str]  # tensor -> op_type of the node that makes it
    constants: frozenset[str]
    parameters: tuple[tuple[str, tuple[int, ...]], ...]  # trainable float initializers
    output_shapes: Mapping[str, tuple[int, ...]]  # graph outputs with a static shape
    outputs: tuple[str, ...]
    output_producers: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # tensor -> (node, index)
    #: nodes the framework runs per step (Constant nodes and constant-only subgraphs excluded)
    forward_nodes: int = 0
    #: of those, the nodes autograd records (an input needs a gradient): each runs again in the backward pass
    autograd_nodes: int = 0

    def with_inferred_outputs(self, nodes: Sequence[Any]) -> GraphFacts:
        """Fill graph output shapes the file leaves symbolic from an extraction's inferred node outputs
        (``nodes``: :class:`dlbench.extract.NodeRecord` objects)."""
        records = {node.name: node for node in nodes}
        shapes = dict(self.output_shapes)
        for out in self.outputs:
            producer = self.output_producers.get(out)
            if out in shapes or producer is None or producer[0] not in records:
                continue
            inferred = records[producer[0]].output_shapes
            if producer[1] < len(inferred) and inferred[producer[1]]:
                shapes[out] = tuple(int(d) for d in inferred[producer[1]])
        return replace(self, output_shapes=shapes)

    def input_requires_grad(self, node: str, index: int) -> bool:
        inputs = self.node_inputs.get(node, ())
        return index < len(inputs) and inputs[index] in self.requires_grad


def _carries_gradient(node: Any) -> bool:
    """Whether an ONNX node's outputs carry its inputs' gradient (:func:`dlbench.core.glue.carries_gradient`)."""
    cast_to = next((int(a.i) for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
    return carries_gradient(node.op_type, cast_to)


def graph_facts(model_path: str | Path, batch_size: int | None = None) -> GraphFacts:
    """Trainable parameters (float initializers, less BatchNormalization's running statistics), which
    tensors need a gradient (those computed from a parameter), constants and producers."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    running_stats = {
        node.input[i]
        for node in graph.node
        if node.op_type == "BatchNormalization"
        for i in (3, 4)
        if len(node.input) > i
    }
    parameters = tuple(
        (t.name, tuple(int(d) for d in t.dims))
        for t in graph.initializer
        if t.data_type in FLOAT_ELEMENT_TYPES and t.name not in running_stats and len(t.dims) > 0
    )
    requires = {name for name, _ in parameters}
    constants = set(initializers)
    producers: dict[str, str] = {}
    output_producers: dict[str, tuple[str, int]] = {}
    node_inputs: dict[str, tuple[str, ...]] = {}
    forward_nodes = autograd_nodes = 0
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        inputs = tuple(node.input)
        node_inputs[name] = inputs
        present = [i for i in inputs if i]
        if node.op_type == "Constant" or (present and all(i in constants for i in present)):
            constants.update(o for o in node.output if o)
            if _carries_gradient(node) and any(i in requires for i in present):
                # weight preprocessing (Transpose(weight) -> MatMul): no operation of its own, yet autograd
                # differentiates through it to the weight, so what it feeds needs the gradient
                requires.update(o for o in node.output if o)
            continue
        forward_nodes += 1
        if _carries_gradient(node) and any(i in requires for i in present):
            requires.update(o for o in node.output if o)
            autograd_nodes += 1
    for index, node in enumerate(graph.node):
        for position, out in enumerate(node.output):
            producers[out] = node.op_type
            output_producers[out] = (node.name or f"{node.op_type}_{index}", position)
    output_shapes = {}
    for out in graph.output:
        dims = out.type.tensor_type.shape.dim
        shape = []
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif i == 0 and batch_size is not None:
                shape.append(int(batch_size))
            else:
                shape = []
                break
        if shape:
            output_shapes[out.name] = tuple(shape)
    return GraphFacts(
        node_inputs=node_inputs,
        requires_grad=frozenset(requires),
        producers=producers,
        constants=frozenset(constants),
        parameters=parameters,
        output_shapes=output_shapes,
        outputs=tuple(o.name for o in graph.output),
        output_producers=output_producers,
        forward_nodes=forward_nodes,
        autograd_nodes=autograd_nodes,
    )


@dataclass(frozen=True)
class TrainingStep:
    """The operations of one training step: ``passes`` names each one's pass, ``notes`` what was adjusted
    (pruned gradients, fused bias additions, added loss and optimizer operations)."""

    operations: tuple[Operation, ...]
    passes: Mapping[int, str]
    notes: tuple[str, ...] = ()
    #: (what, why) the script ran that no operation costs: an optimizer or loss without a benchmark
    not_costed: tuple[tuple[str, str], ...] = ()

    def pass_of(self, op_id: int) -> str:
        return self.passes.get(op_id, "forward")


def training_step(
    forward: Sequence[Operation],
    unfolding: Any,
    facts: GraphFacts | None,
    options: Mapping[str, Any] | None = None,
    dtype_bytes: int = 4,
    ran: StepRun | None = None,
) -> TrainingStep:
    """Forward operations and their unfolded backward passes (``unfolding``: a
    :class:`dlbench.unfold.Unfolding` of ``forward``), adjusted by the graph's facts:

    - ``prune_gradients``: a derived pass runs once per node whose differentiated input needs a gradient
      (the first layer computes no data gradient);
    - ``fuse_bias_add``: an Add of a constant right after a MatMul/Gemm is PyTorch's addmm, not a kernel;
    - ``loss``: the losses ``ran`` read from the profile, forward and backward (:mod:`dlbench.onnx.update`);
      without them cross entropy on the first graph output flattened to (rows, classes), assumed;
    - ``optimizer``: the optimizers, ``zero_grad`` and clipping the script's run facts recorded, as they ran;
      without a record SGD with momentum per parameter tensor, assumed (``op_type`` and
      ``updates_per_parameter``: another op_type stands in).

    What ``ran`` names but dlbench cannot cost is in ``not_costed`` and the notes, never costed as another.
    """
    options = dict(options or {})
    notes: list[str] = []
    not_costed: list[tuple[str, str]] = []
    forward_ids = {op.id for op in forward}
    operations: list[Operation] = []
    passes: dict[int, str] = {}
    for op in unfolding.operations:
        pass_name = unfolding.pass_of(op.id)
        count = op.count
        if facts is not None and op.nodes:
            if pass_name != "forward" and options.get("prune_gradients", True):
                index = unfolding.input_of(op.id)  # the input the pass differentiates (the unfold table's)
                needed = sum(
                    1 for node in op.nodes if node not in facts.node_inputs or facts.input_requires_grad(node, index)
                )
                count = op.count * needed // max(len(op.nodes), 1)
                if count < op.count:
                    notes.append(f"{op.op_type} {pass_name} of {op.count - count} node(s) pruned: no gradient needed")
            if op.op_type == "Add" and op.id in forward_ids and options.get("fuse_bias_add", True):
                fused = sum(1 for node in op.nodes if _is_bias_add(facts, node))
                if fused:
                    count = op.count - fused * op.count // max(len(op.nodes), 1)
                    notes.append(f"Add of {fused} node(s) fused into the preceding MatMul/Gemm (addmm)")
        if count <= 0:
            continue
        operations.append(replace(op, count=count) if count != op.count else op)
        passes[op.id] = pass_name
    notes.extend(declared_notes(unfolding.declared))  # passes that cost nothing or are not predicted
    next_id = max((op.id for op in operations), default=-1) + 1
    added: list[tuple[str, dict[str, Any], int, str, str]] = []
    loss = options.get("loss") or {}
    if loss.get("enabled", True) and ran is not None and ran.losses is not None:
        made = loss_operations(ran.losses)
        added += made.operations
        notes += made.notes if ran.losses else ["loss: no loss operator dlbench knows in the profile; none added"]
        not_costed += made.not_costed
    elif facts is not None and loss.get("enabled", True) and facts.outputs:
        added_loss, loss_note = _assumed_loss(facts, loss)
        added += added_loss
        notes.append(loss_note)
    optimizer = options.get("optimizer") or {}
    if optimizer.get("enabled", True) and ran is not None and ran.optimizers is not None:
        made = update_operations(ran)
        added += made.operations
        notes += made.notes or ["optimizer: the script stepped no torch.optim optimizer; no optimizer operations"]
        not_costed += made.not_costed
    elif facts is not None and optimizer.get("enabled", True) and facts.parameters:
        added_update, update_note = _assumed_optimizer(facts, optimizer)
        added += added_update
        notes.append(update_note)
    for op_type, params, count, pass_name, node in added:
        operations.append(_synthetic(next_id, op_type, params, count, node, dtype_bytes))
        passes[next_id] = pass_name
        next_id += 1
    return TrainingStep(tuple(operations), passes, tuple(dict.fromkeys(notes)), tuple(not_costed))


def _synthetic(op_id: int, op_type: str, params: Mapping[str, Any], count: int, node: str, dtype_bytes: int):
    descriptors = DESCRIPTORS.get(op_type, list(params))
    ordered = tuple((d, params[d]) for d in descriptors if d in params)
    flops, moved = operation_cost(op_type, dict(ordered), dtype_bytes)
    return Operation(
        id=op_id,
        op_type=op_type,
        params=ordered,
        count=count,
        nodes=tuple(n for n in node.split(",") if n),  # a synthetic operation's nodes, comma-separated
        flops=flops or None,
        bytes_moved=moved or None,
    )


def _is_bias_add(facts: GraphFacts, node: str) -> bool:
    inputs = [i for i in facts.node_inputs.get(node, ()) if i]
    if len(inputs) != 2:
        return False
    constant = [i in facts.constants for i in inputs]
    if constant.count(True) != 1:
        return False
    other = inputs[constant.index(False)]
    return facts.producers.get(other) in ("MatMul", "Gemm")


# --------------------------------------------------- the loss and optimizer dlbench assumes when none was recorded


def _assumed_loss(facts: GraphFacts, loss: Mapping[str, Any]) -> tuple[list, str]:
    """Cross entropy on the first graph output flattened to (rows, classes) (``op_type: Softmax``: a Softmax
    forward and backward stand in for it)."""
    shape = facts.output_shapes.get(facts.outputs[0])
    if not shape:
        return [], f"loss: the shape of output {facts.outputs[0]!r} is not static; no loss operations"
    rows, classes = math.prod(shape[:-1]) if len(shape) > 1 else 1, shape[-1]
    op_type = str(loss.get("op_type", "SoftmaxCrossEntropyLoss"))
    added = []
    for mode, pass_name in enumerate(LOSS_PASSES):
        params = (
            {"N": rows, "C": classes, "mode": mode}
            if op_type == "SoftmaxCrossEntropyLoss"
            else {"N": 1, "C": 1, "H": rows, "W": classes, "axis": 3, "mode": mode}  # a Softmax stand-in
        )
        added.append((op_type, params, 1, pass_name, f"loss:{facts.outputs[0]}"))
    return added, f"loss: {op_type} forward and backward on the logits ({rows} x {classes}), assumed (none recorded)"


def _assumed_optimizer(facts: GraphFacts, optimizer: Mapping[str, Any]) -> tuple[list, str]:
    """SGD with momentum 0.9 per parameter tensor, per tensor (no foreach), or ``updates_per_parameter``
    operations of another op_type (Add) per tensor."""
    op_type = str(optimizer.get("op_type", "SGD"))
    per_parameter = 1 if op_type == "SGD" else int(optimizer.get("updates_per_parameter", 3))
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for name, shape in facts.parameters:
        by_shape.setdefault(rank4("SGD", shape), []).append(name)
    added = []
    for shape, names in by_shape.items():
        params: dict[str, Any] = dict(zip("NCHW", shape, strict=True))
        if op_type == "SGD":
            params.update(tensors=len(names), numel=len(names) * math.prod(shape), momentum=0.9)
            count = 1
        else:
            params.update({f"{d}_b": v for d, v in zip("NCHW", shape, strict=True)})
            count = per_parameter * len(names)
        added.append((op_type, params, count, OPTIMIZER_PASS, ",".join(f"optimizer:{name}" for name in names)))
    return added, (
        f"optimizer: {op_type} (momentum 0.9) assumed, no optimizer recorded: {per_parameter} operation(s) per "
        f"parameter tensor ({len(facts.parameters)} tensors)"
    )


def with_dtype_costs(operations: list[Operation], dtype: str) -> list[Operation]:
    """Bytes moved follow the dtype the training ran in (extraction counts 4-byte elements)."""
    size = DTYPE_BYTES.get(dtype, 4)
    if size == 4:
        return operations
    out = []
    for op in operations:
        flops, moved = operation_cost(op.op_type, op.param_dict, size)
        out.append(replace(op, flops=flops or op.flops, bytes_moved=moved or op.bytes_moved))
    return out
