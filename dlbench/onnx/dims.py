"""The dimensions of a model's inputs: the batch (``batch_size``), every other named symbolic dimension
(``dims.<name>=N``), and the open ones that stop an extraction before anything is measured."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.onnx.errors import ModelSettingError


@dataclass(frozen=True)
class InputDimension:
    """One dimension of a graph input: its symbolic name (``""`` when unnamed) or fixed size."""

    input: str
    axis: int
    name: str
    size: int | None  # None: dynamic

    @property
    def where(self) -> str:
        return f"{self.input!r} axis {self.axis}"


@dataclass(frozen=True)
class SetDimensions:
    """What :func:`set_dimensions` did: the value of every symbolic dimension it set (the batch names
    included), and the fixed batch of a model that has no dynamic one (None when it has, or when the fixed
    batch already equals ``batch_size``)."""

    values: Mapping[str, int]
    batch_names: tuple[str, ...]
    fixed_batch: int | None = None
    batch_inputs: tuple[str, ...] = ()


def input_dimensions(model: Any, weights: Collection[str] = ()) -> list[InputDimension]:
    """Every dimension of every graph input that is not a weight, in order."""
    skip = {t.name for t in model.graph.initializer} | set(weights)
    found = []
    for value in model.graph.input:
        if value.name in skip or not value.type.HasField("tensor_type"):
            continue
        ttype = value.type.tensor_type
        if not ttype.HasField("shape"):
            continue
        for axis, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                found.append(InputDimension(value.name, axis, "", int(dim.dim_value)))
            else:
                found.append(InputDimension(value.name, axis, dim.dim_param if dim.HasField("dim_param") else "", None))
    return found


def dimension_names(model: Any, weights: Collection[str] = ()) -> list[str]:
    """The model's named symbolic input dimensions, in first-use order."""
    return list(dict.fromkeys(d.name for d in input_dimensions(model, weights) if d.name))


def _uses(found: list[InputDimension]) -> str:
    return ", ".join(d.where for d in found)


def set_dimensions(
    model: Any,
    batch_size: int,
    dims: Mapping[str, int],
    path: Path,
    weights: Collection[str] = (),
) -> SetDimensions:
    """Give every dynamic first dimension of an input the batch size and every named dimension in ``dims``
    its value, in the inputs and wherever the name recurs (value_info, outputs).

    Raises :class:`ModelSettingError` for a name in ``dims`` the model lacks (listing the names it has), for
    the batch set through ``dims``, and for any dimension still open afterwards (listing each, the inputs
    that use it and the override to set). A model whose batch is fixed is left alone; ``fixed_batch``
    tells the caller when it differs from ``batch_size`` (see :mod:`dlbench.onnx.rebatch`)."""
    found = input_dimensions(model, weights)
    names = list(dict.fromkeys(d.name for d in found if d.name))
    batch_names = tuple(dict.fromkeys(d.name for d in found if d.axis == 0 and d.size is None and d.name))
    for key, value in dims.items():
        if key in batch_names:
            raise ModelSettingError(
                f"{path}: dims.{key}: {key!r} is the model's batch dimension; set it with batch_size={value}"
            )
        if key not in names:
            others = [n for n in names if n not in batch_names]
            listed = ", ".join(others) if others else "none besides the batch"
            raise ModelSettingError(
                f"{path}: dims.{key}: the model has no dimension {key!r}; its named dimensions: {listed}"
                + (f" (the batch, {', '.join(batch_names)}, is batch_size)" if batch_names else "")
            )
        if int(value) < 1:
            raise ModelSettingError(f"{path}: dims.{key} must be >= 1, got {value}")
    values = {name: batch_size for name in batch_names}
    values.update({k: int(v) for k, v in dims.items()})
    dynamic_first = [d for d in found if d.axis == 0 and d.size is None]
    open_dims = [d for d in found if d.size is None and d.axis > 0 and d.name not in values]
    if open_dims:
        lines = []
        for name in dict.fromkeys(d.name for d in open_dims):
            uses = [d for d in open_dims if d.name == name]
            if name:
                lines.append(f"  {name!r}: used by {_uses(uses)}; set dims.{name}=N")
            else:
                lines.append(
                    f"  unnamed: {_uses(uses)}; export the model with a name for it (dynamic axes) or a fixed size"
                )
        raise ModelSettingError(
            f"{path}: {len(lines)} open input dimension(s) besides the batch; nothing is extracted until each "
            "has a size:\n" + "\n".join(lines)
        )
    _apply(model, values, dynamic_first, batch_size)
    fixed_batch, batch_inputs = None, ()
    if not dynamic_first:
        firsts = [d for d in found if d.axis == 0]
        if firsts and all(d.size != batch_size for d in firsts):
            fixed_batch = firsts[0].size
            batch_inputs = tuple(d.input for d in firsts if d.size == fixed_batch)
    return SetDimensions(values=values, batch_names=batch_names, fixed_batch=fixed_batch, batch_inputs=batch_inputs)


def _apply(model: Any, values: Mapping[str, int], dynamic_first: list[InputDimension], batch_size: int) -> None:
    first = {d.input for d in dynamic_first}
    for value in model.graph.input:
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if axis == 0 and value.name in first and not (dim.HasField("dim_value") and dim.dim_value > 0):
                dim.dim_value = batch_size  # clears dim_param (a oneof)
            elif dim.HasField("dim_param") and dim.dim_param in values:
                dim.dim_value = values[dim.dim_param]
    for value in [*model.graph.value_info, *model.graph.output]:
        if not value.type.HasField("tensor_type"):
            continue
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in values:
                dim.dim_value = values[dim.dim_param]
