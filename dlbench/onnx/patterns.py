"""ONNX spellings of one PyTorch operator: the exporter writes ``nn.GELU`` (opset < 20) as Div(x, sqrt 2) -> Erf
-> Add 1 -> Mul x -> Mul 0.5, and ``GELU(approximate="tanh")`` as nine nodes around a Tanh, while training runs
one ``aten::gelu`` and one ``aten::gelu_backward``. When the profile shows PyTorch's GELU ran, the operations of
each such pattern become one Gelu operation of its form (forward, and the backward the unfold table derives),
so neither pass is predicted as five or nine kernels. (A tanh GELU written out by hand exports the same nine
nodes; it is fused only where the profile shows ``aten::gelu`` ran too.)"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlbench.core.descriptors import operation_cost
from dlbench.core.values import Operation

#: The profiled operator that says the script ran PyTorch's fused GELU (not one written out by hand).
GELU_OPERATOR = "aten::gelu"


@dataclass(frozen=True)
class ExportedGelu:
    """One exported GELU: its node names, the node whose shape is the GELU's (Erf or Tanh) and its
    ``approximate`` (0: the exact, erf form; 1: the tanh form)."""

    nodes: tuple[str, ...]
    anchor: str
    approximate: int


class _Graph:
    """Producers and consumers of an ONNX graph's tensors, and which tensors are constants."""

    def __init__(self, graph) -> None:
        self.graph = graph
        self.constants = {t.name for t in graph.initializer}
        self.names = [node.name or f"{node.op_type}_{i}" for i, node in enumerate(graph.node)]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(graph.node):
            if node.op_type == "Constant":
                self.constants.update(node.output)
            for out in node.output:
                self.producer[out] = i
            for tensor in node.input:
                self.consumers.setdefault(tensor, []).append(i)

    def op(self, index: int | None) -> str | None:
        return None if index is None else self.graph.node[index].op_type

    def output(self, index: int) -> str:
        return self.graph.node[index].output[0]

    def only_consumer(self, tensor: str, op_type: str) -> int | None:
        users = self.consumers.get(tensor, [])
        return users[0] if len(users) == 1 and self.op(users[0]) == op_type else None

    def other_input(self, index: int, known: str) -> str | None:
        inputs = list(self.graph.node[index].input)
        return inputs[1 - inputs.index(known)] if len(inputs) == 2 and known in inputs else None

    def binary(self, tensor: str, op_type: str) -> tuple[int, list[str]] | None:
        """The node of ``op_type`` producing ``tensor`` (used by nothing else) and its two inputs."""
        index = self.producer.get(tensor)
        if self.op(index) != op_type or len(self.consumers.get(tensor, [])) != 1:
            return None
        inputs = list(self.graph.node[index].input)
        return (index, inputs) if len(inputs) == 2 else None

    def by_constant(self, tensor: str, op_type: str) -> tuple[int, str] | None:
        """The node of ``op_type`` producing ``tensor`` from a constant and one other input, and that input."""
        found = self.binary(tensor, op_type)
        if found is None:
            return None
        index, inputs = found
        others = [t for t in inputs if t not in self.constants]
        return (index, others[0]) if len(others) == 1 else None

    def tail(self, start: str, x: str) -> tuple[int, int, int] | None:
        """The Add 1, Mul x and Mul 0.5 both GELU forms end with, after the node writing ``start``."""
        add = self.only_consumer(start, "Add")
        if add is None or self.other_input(add, start) not in self.constants:
            return None
        mul = self.only_consumer(self.output(add), "Mul")
        if mul is None or self.other_input(mul, self.output(add)) != x:
            return None
        half = self.only_consumer(self.output(mul), "Mul")
        if half is None or self.other_input(half, self.output(mul)) not in self.constants:
            return None
        return add, mul, half


def exported_gelus(model_path: str | Path) -> list[ExportedGelu]:
    """Every GELU the exporter wrote out: ``nn.GELU()`` as Div(x, sqrt 2), Erf, Add 1, Mul x, Mul 0.5, and
    ``GELU(approximate="tanh")`` as Mul(x, x), Mul x, Mul 0.044715, Add x, Mul sqrt(2/pi), Tanh, Add 1, Mul x,
    Mul 0.5."""
    import onnx

    g = _Graph(onnx.load(str(model_path), load_external_data=False).graph)
    found = []
    for index, node in enumerate(g.graph.node):
        if node.op_type == "Erf":
            div = g.producer.get(node.input[0])
            if g.op(div) != "Div" or g.graph.node[div].input[1] not in g.constants:
                continue
            x = g.graph.node[div].input[0]
            tail = g.tail(node.output[0], x)
            if tail is not None:
                nodes = (div, index, *tail)
                found.append(ExportedGelu(tuple(g.names[i] for i in nodes), g.names[index], 0))
        elif node.op_type == "Tanh":
            head = _tanh_head(g, node.input[0])
            if head is None:
                continue
            x, inner = head
            tail = g.tail(node.output[0], x)
            if tail is not None:
                nodes = (*inner, index, *tail)
                found.append(ExportedGelu(tuple(g.names[i] for i in nodes), g.names[index], 1))
    return found


def _tanh_head(g: _Graph, tensor: str) -> tuple[str, tuple[int, ...]] | None:
    """x and the five nodes of sqrt(2/pi) * (x + 0.044715 * x * x * x) writing ``tensor``, if they do."""
    scale = g.by_constant(tensor, "Mul")
    if scale is None:
        return None
    add = g.binary(scale[1], "Add")
    if add is None:
        return None
    for x, cubic in (add[1], add[1][::-1]):
        coefficient = g.by_constant(cubic, "Mul")
        cube = coefficient and g.binary(coefficient[1], "Mul")
        if not cube or x not in cube[1]:
            continue
        square = g.binary(cube[1][1 - cube[1].index(x)], "Mul")
        if square and square[1] == [x, x]:
            return x, (square[0], cube[0], coefficient[0], add[0], scale[0])
    return None


def fuse_exported_gelus(
    operations: Sequence[Operation], model_path: str | Path, profiled: Collection[str]
) -> tuple[list[Operation], list[str]]:
    """``operations`` with each exported GELU pattern as one Gelu operation (of the Erf's shape), when the
    ``profiled`` operator names include :data:`GELU_OPERATOR`; else unchanged. Returns the notes too."""
    if GELU_OPERATOR not in profiled:
        return list(operations), []
    patterns = exported_gelus(model_path)
    if not patterns:
        return list(operations), []
    fused = {name for pattern in patterns for name in pattern.nodes}
    of_anchor = {pattern.anchor: pattern for pattern in patterns}
    kept: list[Operation] = []
    gelus: dict[tuple, list[str]] = {}
    for op in operations:
        if op.op_type in ("Erf", "Tanh"):
            for node in op.nodes:
                if node in of_anchor:
                    shape = tuple((d, op.param_dict.get(d, 1)) for d in "NCHW")
                    gelus.setdefault((*shape, ("approximate", of_anchor[node].approximate)), []).append(node)
        remaining = tuple(n for n in op.nodes if n not in fused)
        if len(remaining) == len(op.nodes):
            kept.append(op)
        elif remaining:
            count = op.count * len(remaining) // len(op.nodes)
            kept.append(replace(op, nodes=remaining, count=count))
    next_id = max((op.id for op in operations), default=-1) + 1
    for offset, (shape, nodes) in enumerate(gelus.items()):
        params = (*shape, ("mode", 0))
        flops, moved = operation_cost("Gelu", dict(params))
        kept.append(
            Operation(
                next_id + offset,
                "Gelu",
                params,
                count=len(nodes),
                nodes=tuple(nodes),
                flops=flops or None,
                bytes_moved=moved or None,
            )  # fmt: skip
        )
    exact = sum(1 for pattern in patterns if not pattern.approximate)
    spelled = [f"{exact} exported Div-Erf-Add-Mul-Mul pattern(s)"] if exact else []
    if len(patterns) > exact:
        spelled.append(f"{len(patterns) - exact} exported tanh-form pattern(s) of nine nodes")
    note = (
        f"GELU: {' and '.join(spelled)} predicted as one Gelu each, forward and backward (the script ran "
        f"{GELU_OPERATOR}: one kernel per pass, not one per node)"
    )
    return kept, [note]
