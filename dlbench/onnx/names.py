"""Names a person recognises for a model's nodes: the node's own name where the exporter gave a meaningful
one (``/encoder/layer.0/attention/MatMul``), else the layer its weights belong to (``gpu_0/res2_0_branch2a``
from ``gpu_0/res2_0_branch2a_w_0``) or, for a weightless node, the layer that feeds it, plus its op type.
Names depend on the graph only, never on the batch size or other dimensions, so the same layer lines up
across runs."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

#: Node and tensor names exporters generate from counters (``n14``, ``r7``, ``123``): no meaning of their own.
_GENERIC = re.compile(r"[A-Za-z]{0,3}_?\d+|OC2_DUMMY_\d+|onnx::.*")
#: Weight-name suffixes that mark a parameter of a layer.
_SUFFIXES = "w|b|s|weight|bias|W|B|gamma|beta|scale|kernel|rm|riv|mean|var|running_mean|running_var"
_PARAMETER = re.compile(rf"([._/]({_SUFFIXES}))(_\d+)?(__SHAPE)?$")


def is_generic(name: str) -> bool:
    return not name or bool(_GENERIC.fullmatch(name))


def layer_stem(tensor: str) -> str:
    """The layer a weight belongs to: its name without the parameter suffix."""
    return _PARAMETER.sub("", tensor)


def layer_names(graph: Any, constants: Collection[str]) -> list[str]:
    """One stable, unique name per node of ``graph`` (graph order)."""
    stems: dict[str, str] = {}  # tensor -> the layer stem of its producer (or of the weight itself)
    seen: set[str] = set()
    names: list[str] = []
    for index, node in enumerate(graph.node):
        ins = [i for i in node.input if i]
        weights = [i for i in ins if i in constants]
        if not is_generic(node.name):
            name = stem = node.name
        else:
            meaningful = [stems.get(w, w) for w in weights if not is_generic(stems.get(w, w))]
            if meaningful:
                stem = layer_stem(meaningful[0])
            else:
                fed = [stems[i] for i in ins if i not in constants and i in stems]
                stem = fed[0] if fed else ""
            name = f"{stem}/{node.op_type}" if stem else f"{node.op_type}_{index}"
        if name in seen:
            name = f"{name}:{index}"
        seen.add(name)
        names.append(name)
        for out in node.output:
            if out:
                stems[out] = stem or ("" if is_generic(out) else out)
    return names
