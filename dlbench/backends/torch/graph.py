"""A whole ONNX graph run by PyTorch in eval mode, node after node (:mod:`.graph_ops`), under
``torch.inference_mode``: the torch side of an end-to-end inference latency. Weights become tensors once;
what depends only on weights and on the (fixed) input shapes is computed once when the graph is built, as
an eager PyTorch model holds its buffers and computes shapes as Python numbers; every other node runs on
each call, and each activation is released after its last use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dlbench.backends.torch.graph_ops import BUILDERS, Op, UnsupportedNode, split


@dataclass(frozen=True)
class Step:
    op_type: str
    run: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper, numpy_helper

    attrs: dict[str, Any] = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        if attribute.type == attribute.TENSOR:
            value = torch.from_numpy(np.array(numpy_helper.to_array(value)))
        attrs[attribute.name] = value
    return attrs


def _builder(node: Any, opset: int) -> Op:
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedNode(f"{node.op_type} of domain {node.domain!r}: the torch executor runs ONNX's own ops")
    if node.op_type == "Split":
        return split(_attributes(node), opset, len(node.output))
    if node.op_type not in BUILDERS:
        raise UnsupportedNode(f"{node.op_type} ({node.name or 'unnamed'}): no eval-mode torch call for it")
    return BUILDERS[node.op_type](_attributes(node), opset)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


class TorchGraph:
    """``model`` (a ModelProto with every input dimension fixed) ready to run on ``feeds`` (arrays by
    input name); ``__call__`` returns the graph outputs as tensors."""

    def __init__(self, model: Any, feeds: Mapping[str, np.ndarray]) -> None:
        from onnx import numpy_helper

        graph = model.graph
        opset = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)
        constants: dict[str, torch.Tensor] = {
            t.name: torch.from_numpy(np.array(numpy_helper.to_array(t))) for t in graph.initializer
        }
        self.inputs = tuple(v.name for v in graph.input if v.name not in constants)
        self.outputs = tuple(o.name for o in graph.output)
        values: dict[str, Any] = {**constants, **{k: torch.from_numpy(np.array(v)) for k, v in feeds.items()}}
        fixed = set(constants)  # known without the inputs' values
        self.steps: list[Step] = []
        with torch.inference_mode():
            for node in graph.node:
                if node.op_type == "Constant":
                    value = _attributes(node)
                    tensor = value.get("value")
                    if not isinstance(tensor, torch.Tensor):
                        raise UnsupportedNode(f"Constant {node.name}: only a tensor `value` is supported")
                    values[node.output[0]] = tensor
                    fixed.add(node.output[0])
                    continue
                step = Step(node.op_type, _builder(node, opset), tuple(node.input), tuple(node.output))
                args = [values[name] if name else None for name in step.inputs]
                outputs = _as_tuple(step.run(*args))
                for name, out in zip(step.outputs, outputs, strict=False):
                    if name:
                        values[name] = out
                if node.op_type == "Shape" or all(not name or name in fixed for name in step.inputs):
                    fixed.update(name for name in step.outputs if name)
                else:
                    self.steps.append(step)
        needed = {name for step in self.steps for name in step.inputs} | set(self.outputs)
        self.fixed = {name: values[name] for name in fixed if name in needed}
        # as an eager forward frees each activation after its last use, so the allocator can reuse it
        last_use: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            for name in step.inputs:
                if name and name not in self.fixed:
                    last_use[name] = index
        self.release: list[tuple[str, ...]] = [() for _ in self.steps]
        for name, index in last_use.items():
            if name not in self.outputs:
                self.release[index] += (name,)

    def __call__(self, feeds: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        with torch.inference_mode():
            values: dict[str, Any] = {**self.fixed, **feeds}
            for step, release in zip(self.steps, self.release, strict=True):
                outputs = step.run(*[values[name] if name else None for name in step.inputs])
                if isinstance(outputs, tuple):
                    for name, out in zip(step.outputs, outputs, strict=False):
                        values[name] = out
                else:
                    values[step.outputs[0]] = outputs
                for name in release:
                    del values[name]
            return [values[name] for name in self.outputs]

    def op_types(self) -> dict[str, int]:
        """Nodes run on every call, by op type."""
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step.op_type] = counts.get(step.op_type, 0) + 1
        return counts
