"""The step's tensors in the dtypes they ran, for the cache footprint (:mod:`dlbench.onnx.footprint`): a
bfloat16 autocast step's working set and reuse distances are sized at 2 bytes an element where autocast ran
bfloat16, from each operation's dtype as :mod:`dlbench.analysis.ran_as` decided it from the profile.

Autocast casts a weight once per forward: the bfloat16 copy is a tensor of its own, read by the GEMM or
convolution, while the float32 master weight is read by the cast and the optimizer. The copies enter the
graph the footprint replays as cast nodes of their own (:func:`tensors_as_ran`), and the step's ``Cast``
operations (:mod:`dlbench.analysis.casts`) take their footprints from those nodes' events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dlbench.core.autocast import runs_in_lower_precision
from dlbench.core.dtypes import DTYPE_BYTES, FLOAT_TYPES
from dlbench.onnx.footprint import StepFootprint, graph_dtypes, placed_step

#: how a cast node the footprint replays is named: ``autocast:<tensor>@<dtype>``
CAST_PREFIX = "autocast:"
#: what the footprint's note on operations it could not place says (rewritten once the casts are placed)
UNPLACED = " with no node of the graph"


@dataclass(frozen=True)
class CastNode:
    """A cast autocast ran, as a node record the footprint replays (the fields it reads of
    :class:`dlbench.onnx.extract.NodeRecord`): one input, its copy in another dtype."""

    index: float
    name: str
    input_shapes: tuple[Any, ...]
    output_shapes: tuple[Any, ...]
    #: the dtypes it casts from (its input's) and to (its copy's)
    casts: tuple[str, str] = ("", "")
    kind: str = "compute"
    node: None = None


@dataclass(frozen=True)
class TensorsAsRan:
    """The graph the footprint replays, as the step ran: the extraction's nodes and a :class:`CastNode` per
    copy autocast made, the graph facts with the copies' readers rewired to them, and every tensor's dtype."""

    nodes: tuple[Any, ...]
    facts: Any
    dtypes: dict[str, str]


def tensors_as_ran(
    operations: Sequence[Any], passes: Mapping[int, str], nodes: Sequence[Any], facts: Any, sweep_dtype: str,
    device: str = "cpu",
) -> TensorsAsRan:  # fmt: skip
    """Each tensor's dtype, by this rule: a tensor a node writes is in the dtype of the forward operation that
    ran the node (its ``dtype``, the sweep's where empty); a floating tensor no node writes (a weight, the
    batch) in the sweep's dtype (the float32 master of a mixed-precision step); a non-floating one at the
    graph's element type. A node of an op type autocast runs in the lower precision (convolution, GEMM,
    matmul) that reads a floating tensor of another dtype reads a copy in its own dtype, a tensor of its own
    (``<tensor>@<dtype>``, needing a gradient where the tensor does), made once per forward by a cast node
    right before its first reader; every other node reads its inputs as they are. A layout node's output is
    its input (a view)."""
    output_names: dict[str, list[str]] = {}
    for tensor, (node, position) in facts.output_producers.items():
        names = output_names.setdefault(node, [])
        names.extend([""] * (position + 1 - len(names)))
        names[position] = tensor
    ordered = sorted(nodes, key=lambda n: n.index)
    graph = graph_dtypes(ordered, facts.node_inputs, output_names)
    ran: dict[str, tuple[str, str]] = {}  # node -> (dtype, op type) of its forward operation
    for op in operations:
        if passes.get(op.id, "forward") == "forward":
            for name in op.nodes:
                ran.setdefault(name, (op.dtype or sweep_dtype, op.op_type))
    alias: dict[str, str] = {}
    dtypes = {t: (sweep_dtype if d in FLOAT_TYPES else d) for t, d in graph.items()}
    node_inputs = dict(facts.node_inputs)
    producers, requires_grad = dict(facts.output_producers), set(facts.requires_grad)
    casts: dict[str, CastNode] = {}
    for node in ordered:
        inputs = list(node_inputs.get(node.name, ()))
        if node.kind == "layout" and inputs and inputs[0]:
            for out in output_names.get(node.name, ()):
                alias[out] = root = alias.get(inputs[0], inputs[0])
                viewed = dtypes.pop(out, None)  # sized as its input (whose type a layout node's spec may not say)
                if viewed:
                    dtypes.setdefault(root, viewed)
            continue
        dtype, op_type = ran.get(node.name, (sweep_dtype, ""))
        for out in output_names.get(node.name, ()):
            if out and graph.get(out, sweep_dtype) in FLOAT_TYPES:
                dtypes[out] = dtype
        if not op_type or not runs_in_lower_precision(op_type, device):
            continue
        for position, tensor in enumerate(inputs):
            root = alias.get(tensor, tensor)
            if not tensor or dtypes.get(root, "") not in FLOAT_TYPES or dtypes[root] == dtype:
                continue
            copy = f"{root}@{dtype}"
            if copy not in casts:
                shape = node.input_shapes[position] if position < len(node.input_shapes) else None
                cast = CastNode(node.index - 0.5, f"{CAST_PREFIX}{copy}", (shape,), (shape,), (dtypes[root], dtype))
                casts[copy] = cast
                node_inputs[casts[copy].name] = (tensor,)
                producers[copy] = (casts[copy].name, 0)
                dtypes[copy] = dtype
                if tensor in requires_grad or root in requires_grad:
                    requires_grad.add(copy)
            inputs[position] = copy
        node_inputs[node.name] = tuple(inputs)
    rewired = replace(facts, node_inputs=node_inputs, output_producers=producers,
                      requires_grad=frozenset(requires_grad))  # fmt: skip
    return TensorsAsRan((*ordered, *casts.values()), rewired, dtypes)


def placed_as_ran(
    step: Any, unfolding: Any, nodes: Sequence[Any], facts: Any, sweep_dtype: str, device: str = "cpu"
) -> tuple[Any, StepFootprint]:
    """:func:`dlbench.onnx.footprint.placed_step` on the step as it ran (:func:`tensors_as_ran`); each
    ``Cast`` operation of pass ``autocast`` takes the mean footprint of the cast nodes of its shape and dtype
    pair (a cast to the lower precision: their forward; one back to float32: the gradient's cast in the
    backward)."""
    graph = tensors_as_ran(step.operations, step.passes, nodes, facts, sweep_dtype, device)
    placed, decided = placed_step(step, unfolding, graph.nodes, graph.facts, DTYPE_BYTES.get(sweep_dtype, 4),
                                  tensor_dtypes=graph.dtypes)  # fmt: skip
    casts = [n for n in graph.nodes if isinstance(n, CastNode)]
    operations, placed_casts = [], dict(decided.operations)
    for op in placed.operations:
        found = _cast_footprints(op, placed.pass_of(op.id), casts, decided)
        if found:
            op = replace(op, footprint_bytes=round(sum(found) / len(found)))
            placed_casts[op.id] = op.footprint_bytes
        operations.append(op)
    unplaced = [op.label for op in operations if op.footprint_bytes == decided.working_set_bytes]
    notes = tuple(n for n in decided.notes if UNPLACED not in n)
    if unplaced:
        shown = ", ".join(sorted(set(unplaced))[:8])
        notes += (f"cache state from the step: {len(unplaced)} operation(s){UNPLACED} ({shown}) "
                  "rotate over the step's whole working set",)  # fmt: skip
    return replace(placed, operations=tuple(operations)), replace(decided, operations=placed_casts, notes=notes)


def _cast_footprints(op: Any, pass_name: str, casts: Sequence[CastNode], decided: StepFootprint) -> list[int]:
    if op.op_type != "Cast" or pass_name != "autocast":
        return []
    params = op.param_dict
    elements = params.get("N", 1) * params.get("C", 1) * params.get("H", 1) * params.get("W", 1)
    found = []
    for cast in casts:
        if _elements(cast.input_shapes[0] or ()) != elements:
            continue
        source, copy = cast.casts
        if op.dtype == source and (cast.name, "forward") in decided.events:  # to the lower precision
            found.append(decided.events[(cast.name, "forward")])
        elif op.dtype == copy and (cast.name, "0") in decided.events:  # its gradient, back
            found.append(decided.events[(cast.name, "0")])
    return found


def _elements(shape: Sequence[Any]) -> int:
    total = 1
    for d in shape:
        total *= int(d) if isinstance(d, int) else 1
    return total
