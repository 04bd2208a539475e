"""The dimensions of a model's inputs: which are symbolic or open, and setting the batch dimension."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from dlbench.onnx.errors import ExtractionError


def set_batch(
    model: Any, batch_size: int, path: Path, weights: Collection[str] = (), notes: list[str] | None = None
) -> list[str]:
    """Give graph inputs' dynamic first dimension the batch size; returns the symbolic names replaced.

    A first dimension is dynamic when it is a ``dim_param``, unset, or a ``dim_value`` of 0 or -1. When no
    input has one, the model's batch is fixed and must equal ``batch_size``. Other open input dimensions
    stay open (and are reported in ``notes``): the nodes that depend on them cannot be described.
    """
    initializers = {t.name for t in model.graph.initializer} | set(weights)
    inputs = [i for i in model.graph.input if i.name not in initializers and i.type.HasField("tensor_type")]
    ranked = [i for i in inputs if i.type.tensor_type.HasField("shape") and i.type.tensor_type.shape.dim]
    dynamic, fixed = [], []
    for value in ranked:
        for position, other in enumerate(value.type.tensor_type.shape.dim[1:], start=1):
            if notes is not None and not (other.HasField("dim_value") and other.dim_value > 0):
                label = f"{other.dim_param!r}" if other.dim_param else "unnamed"
                notes.append(
                    f"input {value.name!r}: dimension {position} is open ({label}); only the batch dimension is "
                    "set, so nodes whose shapes depend on it cannot be described"
                )
        dim = value.type.tensor_type.shape.dim[0]
        if dim.HasField("dim_value") and dim.dim_value > 0:
            fixed.append((value.name, int(dim.dim_value)))
        else:
            dynamic.append(value)
    if not dynamic:
        mismatched = [(name, size) for name, size in fixed if size != batch_size]
        if mismatched and len(mismatched) == len(fixed):
            name, size = mismatched[0]
            raise ExtractionError(
                f"{path}: input {name!r} has a fixed batch dimension of {size}, so batch_size={batch_size} "
                f"does not fit; use batch_size={size} or export the model with a dynamic batch dimension"
            )
        return []
    names = []
    for value in dynamic:
        dim = value.type.tensor_type.shape.dim[0]
        if dim.HasField("dim_param") and dim.dim_param:
            names.append(dim.dim_param)
        dim.dim_value = batch_size  # clears dim_param (a oneof)
    if names:
        wanted = set(names)
        for value in [*model.graph.value_info, *model.graph.output]:
            if not value.type.HasField("tensor_type"):
                continue
            for d in value.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in wanted:
                    d.dim_value = batch_size
    return names
