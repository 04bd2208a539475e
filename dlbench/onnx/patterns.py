"""ONNX spellings of one PyTorch operator: the exporter writes ``nn.GELU`` (opset < 20) as Div(x, sqrt 2) -> Erf
-> Add 1 -> Mul x -> Mul 0.5, while training runs one ``aten::gelu`` and one ``aten::gelu_backward``. When the
profile shows PyTorch's GELU ran, the five operations of each such pattern become one Gelu operation (forward,
and the backward the unfold table derives), so neither pass is predicted as five kernels."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from dlbench.core.descriptors import operation_cost
from dlbench.core.values import Operation

#: The profiled operator that says the script ran PyTorch's fused GELU (not one written out by hand).
GELU_OPERATOR = "aten::gelu"


def exported_gelus(model_path: str | Path) -> list[tuple[str, ...]]:
    """The node names (Div, Erf, Add, Mul, Mul) of every exact-GELU pattern in the model's graph."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    constants = {t.name for t in graph.initializer}
    names = [node.name or f"{node.op_type}_{i}" for i, node in enumerate(graph.node)]
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        if node.op_type == "Constant":
            constants.update(node.output)
        for out in node.output:
            producer[out] = i
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(i)

    def only_consumer(tensor: str, op_type: str) -> int | None:
        users = consumers.get(tensor, [])
        return users[0] if len(users) == 1 and graph.node[users[0]].op_type == op_type else None

    def other_input(index: int, known: str) -> str | None:
        inputs = list(graph.node[index].input)
        return inputs[1 - inputs.index(known)] if len(inputs) == 2 and known in inputs else None

    found = []
    for erf_index, erf in enumerate(graph.node):
        if erf.op_type != "Erf" or producer.get(erf.input[0]) is None:
            continue
        div_index = producer[erf.input[0]]
        div = graph.node[div_index]
        if div.op_type != "Div" or div.input[1] not in constants:
            continue
        x = div.input[0]
        add_index = only_consumer(erf.output[0], "Add")
        if add_index is None or other_input(add_index, erf.output[0]) not in constants:
            continue
        mul_index = only_consumer(graph.node[add_index].output[0], "Mul")
        if mul_index is None or other_input(mul_index, graph.node[add_index].output[0]) != x:
            continue
        half_index = only_consumer(graph.node[mul_index].output[0], "Mul")
        if half_index is None or other_input(half_index, graph.node[mul_index].output[0]) not in constants:
            continue
        found.append(tuple(names[i] for i in (div_index, erf_index, add_index, mul_index, half_index)))
    return found


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
    fused = {name for pattern in patterns for name in pattern}
    erf_of = {pattern[1]: pattern for pattern in patterns}
    kept: list[Operation] = []
    gelus: dict[tuple, list[str]] = {}
    for op in operations:
        if op.op_type == "Erf":
            for node in op.nodes:
                if node in erf_of:
                    shape = tuple((d, op.param_dict.get(d, 1)) for d in "NCHW")
                    gelus.setdefault(shape, []).append(node)
        remaining = tuple(n for n in op.nodes if n not in fused)
        if len(remaining) == len(op.nodes):
            kept.append(op)
        elif remaining:
            count = op.count * len(remaining) // len(op.nodes)
            kept.append(replace(op, nodes=remaining, count=count))
    next_id = max((op.id for op in operations), default=-1) + 1
    for offset, (shape, nodes) in enumerate(gelus.items()):
        params = (*shape, ("approximate", 0), ("mode", 0))
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
    note = (
        f"GELU: {len(patterns)} exported Div-Erf-Add-Mul-Mul pattern(s) predicted as one Gelu each, forward and "
        f"backward (the script ran {GELU_OPERATOR}: one kernel per pass, not five)"
    )
    return kept, [note]
