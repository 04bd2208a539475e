"""ONNX model -> operations: check the model, infer every tensor's shape at a batch size, and describe each
node by the original tool's parameter descriptors (``?`` and flattened attributes for unknown operators)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.values import Number, Operation
from dlbench.onnx.attributes import UnhandledAttribute, read_attributes
from dlbench.onnx.describe import CannotDescribe, NoCanonicalForm, describe_known, describe_unknown
from dlbench.onnx.dims import set_batch
from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.infer import infer_shapes
from dlbench.onnx.load import check_model, check_weights, default_opset, light_model, load_model

log = logging.getLogger(__name__)

Shape = tuple[int, ...]
Params = tuple[tuple[str, Number], ...]


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


# --------------------------------------------------------------------------------------- batch size


# -------------------------------------------------------------------------------------------- shapes


# ----------------------------------------------------------------------------------------- attributes


# ----------------------------------------------------------------------------------- known operators


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
    check_weights(model, path)
    light, weights = light_model(model)
    check_model(light, path)
    opset = default_opset(model)
    notes: list[str] = []
    set_batch(light, batch_size, path, weights, notes)
    shapes = infer_shapes(light, path, notes)
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
                raise CannotDescribe(
                    f"shape of input {', '.join(map(repr, unknown))} unknown: neither ONNX nor symbolic shape "
                    "inference could infer it"
                )
            readable, flat_attrs = read_attributes(node)
            attrs = dict(readable)
            params = None
            if node.domain in ("", "ai.onnx"):
                try:
                    params = describe_known(node.op_type, in_shapes, attrs, opset, training)
                except NoCanonicalForm as err:
                    notes.append(f"node {name!r} ({node.op_type}): {err}; described by position")
            if params is None:
                params = describe_unknown(in_shapes, list(node.input), tuple(flat_attrs))
        except (UnhandledAttribute, CannotDescribe) as err:
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
