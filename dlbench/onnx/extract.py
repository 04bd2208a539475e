"""ONNX model -> operations: check the model, infer every tensor's shape at a batch size, and describe each
node by the original tool's parameter descriptors (``?`` and flattened attributes for unknown operators)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.nodes import NodeSpec
from dlbench.core.values import Number, Operation
from dlbench.onnx.attributes import UnhandledAttribute, read_attributes
from dlbench.onnx.classes import COMPUTE, CONSTANT, LAYOUT, classify_node, constant_outputs
from dlbench.onnx.describe import CannotDescribe, NoCanonicalForm, describe_known, describe_unknown
from dlbench.onnx.dims import set_dimensions
from dlbench.onnx.errors import ExtractionError, ModelSettingError
from dlbench.onnx.infer import element_types, infer_shapes, small_constant_values
from dlbench.onnx.load import check_model, check_weights, default_opset, light_model, load_model
from dlbench.onnx.names import layer_names
from dlbench.onnx.node_spec import MAX_INDEX_VALUES, NodeSpecError, node_spec
from dlbench.onnx.rebatch import rebatch

log = logging.getLogger(__name__)

Shape = tuple[int, ...]
Params = tuple[tuple[str, Number], ...]


@dataclass(frozen=True)
class NodeRecord:
    """One extracted ONNX node.

    ``input_shapes`` covers every input in order (``None`` for a missing optional input), ``constant``
    says which inputs are weights (initializers, Constant outputs, or computed from those only).
    ``attributes`` keeps every attribute readable (numbers, strings, short tensor summaries);
    ``params`` are the benchmark parameters in descriptor order. ``layer`` is the stable name a person
    recognises (:mod:`dlbench.onnx.names`); ``kind`` is ``compute`` or ``layout`` (with the ``reason`` its
    cost is zero), see :mod:`dlbench.onnx.classes`.
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
    layer: str = ""
    kind: str = COMPUTE
    reason: str = ""
    #: the node itself as data, for executables that run nodes (the onnxruntime backend); None where its
    #: inputs' shapes or types cannot all be carried
    node: NodeSpec | None = None

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
    constant_names: tuple[str, ...] = ()
    constant_counts: Mapping[str, int] = field(default_factory=dict)  # op_type -> constant nodes of it
    dims: tuple[tuple[str, int], ...] = ()  # every symbolic input dimension set, the batch names included
    rebatched_from: int | None = None  # the model's fixed batch, when it was changed to batch_size

    @property
    def total_nodes(self) -> int:
        return sum(self.node_counts.values())

    @property
    def compute_nodes(self) -> tuple[NodeRecord, ...]:
        return tuple(n for n in self.nodes if n.kind == COMPUTE)

    @property
    def layout_nodes(self) -> tuple[NodeRecord, ...]:
        return tuple(n for n in self.nodes if n.kind == LAYOUT)

    def class_counts(self) -> dict[str, int]:
        """Nodes by class: constant (weights), layout (zero cost), compute (operations), skipped."""
        return {
            CONSTANT: self.constant_nodes,
            LAYOUT: len(self.layout_nodes),
            COMPUTE: len(self.compute_nodes),
            "skipped": len(self.skipped),
        }

    def operations(self) -> list[Operation]:
        """One operation per compute node, ids in graph order (see :mod:`dlbench.opdb` to deduplicate);
        constants and layout-only nodes are not operations."""
        return [node_operation(i, node) for i, node in enumerate(self.compute_nodes)]


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
        name=node.layer,
        count=1,
        nodes=(node.name,),
        flops=flops,
        bytes_moved=moved,
        node=node.node,
    )


def extract_operations(
    path: str | Path,
    batch_size: int,
    training: bool = True,
    strict: bool = False,
    dims: Mapping[str, int] | None = None,
) -> Extraction:
    """Read ``path`` and describe every node at ``batch_size`` and the symbolic dimensions ``dims``.

    ``training``: the network is evaluated for training, so BatchNormalization forward uses batch
    statistics (mode 0); otherwise inference (mode 2). Nodes computed from weights only are constants and
    layout-only nodes (:mod:`dlbench.onnx.classes`) are kept apart from the operators to measure. Nodes
    whose shapes stay unknown or whose attributes cannot be read are listed in ``Extraction.skipped``;
    ``strict`` raises :class:`ExtractionError` instead. A model with a fixed batch is re-batched where that
    is provably consistent (:mod:`dlbench.onnx.rebatch`).
    """
    path = Path(path)
    if batch_size < 1:
        raise ModelSettingError(f"{path}: batch_size must be >= 1, got {batch_size}")
    notes: list[str] = []
    model, digest, view, dimensions = _graph_view(path, batch_size, dims or {}, notes)
    graph = model.graph
    walk = _NodeWalk()
    for index, node in enumerate(graph.node):
        walk.add(index, node, view, path, training, strict, notes)
    if walk.skipped:
        log.warning("%s: %d of %d nodes skipped", path, len(walk.skipped), len(graph.node))
    return Extraction(
        path=str(path),
        model_name=path.stem,
        graph_name=graph.name,
        opset=view.opset,
        ir_version=int(model.ir_version),
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        sha256=digest,
        batch_size=batch_size,
        training=training,
        node_counts=dict(walk.counts.most_common()),
        nodes=tuple(walk.records),
        skipped=tuple(walk.skipped),
        notes=tuple(notes),
        constant_nodes=len(walk.constant_names),
        constant_names=tuple(walk.constant_names),
        constant_counts=dict(walk.constant_counts),
        dims=tuple(sorted(dimensions.values.items())),
        rebatched_from=dimensions.fixed_batch,
    )


@dataclass(frozen=True)
class _GraphView:
    """What describing a node needs of its graph: shapes and element types of every tensor, the constants
    (and the nodes computing them), small constant values, opsets and layer names."""

    shapes: Mapping[str, Any]
    types: Mapping[str, Any]
    constants: Any
    constant_nodes: Any
    values: Mapping[str, Any]
    embedded: Mapping[str, Any]
    opsets: Mapping[str, int]
    opset: int
    names: Any


def _graph_view(
    path: Path, batch_size: int, dims: Mapping[str, int], notes: list[str]
) -> tuple[Any, str, _GraphView, Any]:
    """The model (local functions inlined, weights checked), its digest, the view of its graph at
    ``batch_size`` and ``dims`` (re-batched where the model fixes its batch), and the dimensions set."""
    import onnx

    model, digest = load_model(path)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    check_weights(model, path)
    light, weights = light_model(model)
    check_model(light, path)
    dimensions = set_dimensions(light, batch_size, dims, path, weights)
    types = element_types(light.graph)
    if dimensions.fixed_batch is not None:
        shapes, _ = rebatch(
            light, path, dimensions.batch_inputs, dimensions.fixed_batch, batch_size, notes, weights, types
        )
    else:
        shapes = infer_shapes(light, path, notes, types)
    graph = model.graph
    constants, constant_nodes = constant_outputs(graph, shapes=shapes)
    view = _GraphView(
        shapes=shapes, types=types, constants=constants, constant_nodes=constant_nodes,
        values=small_constant_values(graph),
        embedded=small_constant_values(graph, MAX_INDEX_VALUES),  # indices and masks a node file carries
        opsets={imp.domain or "": int(imp.version) for imp in model.opset_import},
        opset=default_opset(model), names=layer_names(graph, constants),
    )  # fmt: skip
    return model, digest, view, dimensions


class _NodeWalk:
    """The graph's nodes as they are read: records of the ones described, the skipped, the constants, counts."""

    def __init__(self) -> None:
        self.records: list[NodeRecord] = []
        self.skipped: list[SkippedNode] = []
        self.constant_names: list[str] = []
        self.constant_counts: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()

    def add(self, index: int, node: Any, view: _GraphView, path: Path, training: bool, strict: bool,
            notes: list[str]) -> None:  # fmt: skip
        self.counts[node.op_type] += 1
        name = node.name or f"{node.op_type}_{index}"
        if index in view.constant_nodes:
            self.constant_names.append(name)
            self.constant_counts[node.op_type] += 1
            return
        kind, reason = classify_node(node, [view.types.get(i) for i in node.input], view.values)
        in_shapes = tuple(view.shapes.get(i) if i else None for i in node.input)
        out_shapes = tuple(view.shapes.get(o) if o else None for o in node.output)
        weight_inputs = tuple(bool(i) and i in view.constants for i in node.input)
        try:
            values = [view.values.get(i) for i in node.input]
            params = (
                _describe(node, in_shapes, out_shapes, values, view.opset, training, notes) if kind == COMPUTE else ()
            )
            readable = read_attributes(node)[0] if kind == COMPUTE else []
        except (UnhandledAttribute, CannotDescribe) as err:
            message = f"{path}: node {name!r} ({node.op_type}): {err}"
            if strict:
                raise ExtractionError(message) from None
            self.skipped.append(SkippedNode(index=index, name=name, op_type=node.op_type, reason=message))
            return
        spec = _node_spec(node, view.opsets, in_shapes, out_shapes, view.types, weight_inputs, view.embedded)
        self.records.append(
            NodeRecord(
                index=index, name=name, op_type=node.op_type, domain=node.domain, input_shapes=in_shapes,
                constant=weight_inputs, output_shapes=out_shapes, attributes=tuple(readable), params=params,
                layer=view.names[index], kind=kind, reason=reason, node=spec if kind == COMPUTE else None,
            )
        )  # fmt: skip


def _node_spec(node: Any, *args: Any) -> NodeSpec | None:
    try:
        return node_spec(node, *args)
    except NodeSpecError:
        return None


def _describe(
    node: Any,
    in_shapes: tuple[Shape | None, ...],
    out_shapes: tuple[Shape | None, ...],
    in_values: list[Any],
    opset: int,
    training: bool,
    notes: list[str],
) -> Params:
    """Canonical parameters where the op type has them (constant inputs and output shapes let Slice, Expand,
    Tile, Split and reductions say what they compute), else its shapes by position and flat attributes."""
    unknown = [i for i, shape in zip(node.input, in_shapes, strict=True) if i and shape is None]
    if unknown:
        raise CannotDescribe(
            f"shape of input {', '.join(map(repr, unknown))} unknown: neither ONNX nor symbolic shape "
            "inference could infer it"
        )
    readable, flat_attrs = read_attributes(node)
    if node.domain in ("", "ai.onnx"):
        try:
            params = describe_known(node.op_type, in_shapes, dict(readable), opset, training, out_shapes, in_values)
        except NoCanonicalForm as err:
            notes.append(f"node {node.name or node.op_type!r} ({node.op_type}): {err}; described by position")
            params = None
        if params is not None:
            return params
    return describe_unknown(in_shapes, list(node.input), tuple(flat_attrs))
