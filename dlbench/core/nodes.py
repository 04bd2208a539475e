"""An ONNX node as plain data: what an executable needs to run the one node an operation stands for (op type,
domain, opsets, attributes, every input's shape and element type, which inputs are weights and the values of
small constants). Operations extracted from a model carry one; the runner hands them to executables that ask
for them in ``<stem>_nodes.json`` (see :mod:`dlbench.operators.protocol`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlbench.core.dtypes import ELEMENT_TYPES

Number = int | float

#: Attribute kinds carried; subgraphs (GRAPH, GRAPHS) and sparse tensors are not.
ATTRIBUTE_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor")


class NodeFormatError(ValueError):
    """A node description that does not parse (the message says which field)."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output. ``weight``: part of the model (an initializer), not fed at run time. ``values``:
    the exact values, row-major, of a small constant whose values matter (a shape, axes, indices, an
    exponent); other tensors are filled with random data of the right type."""

    shape: tuple[int, ...] | None
    dtype: str
    weight: bool = False
    values: tuple[Number, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": None if self.shape is None else list(self.shape), "dtype": self.dtype}
        if self.weight:
            out["weight"] = True
        if self.values is not None:
            out["values"] = list(self.values)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> TensorSpec:
        if not isinstance(data, Mapping) or "dtype" not in data:
            raise NodeFormatError(f"{where}: expected an object with dtype and shape, got {data!r:.80}")
        dtype = str(data["dtype"])
        if dtype not in ELEMENT_TYPES:
            raise NodeFormatError(f"{where}: dtype {dtype!r} is not one of {', '.join(ELEMENT_TYPES)}")
        shape = data.get("shape")
        if shape is not None and (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise NodeFormatError(f"{where}: shape {shape!r} is not a list of sizes")
        values = data.get("values")
        return cls(
            shape=None if shape is None else tuple(shape),
            dtype=dtype,
            weight=bool(data.get("weight", False)),
            values=None if values is None else tuple(values),
        )


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute: name, kind (:data:`ATTRIBUTE_KINDS`) and value; a ``tensor`` value is a TensorSpec
    with its values."""

    name: str
    kind: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        value = self.value.to_dict() if isinstance(self.value, TensorSpec) else self.value
        return {"name": self.name, "type": self.kind, "value": list(value) if isinstance(value, tuple) else value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> AttributeSpec:
        try:
            name, kind, value = str(data["name"]), str(data["type"]), data["value"]
        except (KeyError, TypeError) as err:
            raise NodeFormatError(f"{where}: an attribute needs name, type and value") from err
        if kind not in ATTRIBUTE_KINDS:
            raise NodeFormatError(f"{where}: attribute {name!r} has type {kind!r}, not one of {ATTRIBUTE_KINDS}")
        if kind == "tensor":
            value = TensorSpec.from_dict(value, f"{where}: attribute {name!r}")
        elif kind in ("ints", "floats", "strings"):
            value = tuple(value)
        return cls(name, kind, value)


@dataclass(frozen=True)
class NodeSpec:
    """One ONNX node with everything needed to run it alone. ``inputs`` has None for an omitted optional
    input; ``opsets`` pairs each domain the node needs ("" for ONNX's default) with its version (a mapping
    is accepted and kept as sorted pairs, so that a node, and an operation carrying it, stays hashable)."""

    op_type: str
    domain: str
    opsets: tuple[tuple[str, int], ...]
    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec, ...]
    attributes: tuple[AttributeSpec, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        pairs = self.opsets.items() if isinstance(self.opsets, Mapping) else self.opsets
        object.__setattr__(self, "opsets", tuple(sorted((str(d), int(v)) for d, v in pairs)))

    @property
    def opset_map(self) -> dict[str, int]:
        return dict(self.opsets)

    @property
    def opset(self) -> int:
        """The version of the node's own domain."""
        opsets = self.opset_map
        return int(opsets.get(self.domain, opsets.get("", 0)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "domain": self.domain,
            "opsets": self.opset_map,
            "name": self.name,
            "attributes": [a.to_dict() for a in self.attributes],
            "inputs": [None if t is None else t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "node") -> NodeSpec:
        if not isinstance(data, Mapping):
            raise NodeFormatError(f"{where}: expected an object, got {type(data).__name__}")
        try:
            op_type, domain = str(data["op_type"]), str(data.get("domain", ""))
            opsets = {str(k): int(v) for k, v in dict(data["opsets"]).items()}
            inputs: Sequence[Any] = data.get("inputs", [])
            outputs: Sequence[Any] = data["outputs"]
        except (KeyError, TypeError, ValueError) as err:
            raise NodeFormatError(f"{where}: needs op_type, opsets and outputs ({err})") from err
        attributes = data.get("attributes", [])
        return cls(
            op_type=op_type,
            domain=domain,
            opsets=opsets,
            name=str(data.get("name", "")),
            attributes=tuple(AttributeSpec.from_dict(a, f"{where}: attributes[{i}]") for i, a in enumerate(attributes)),
            inputs=tuple(
                None if t is None else TensorSpec.from_dict(t, f"{where}: inputs[{i}]") for i, t in enumerate(inputs)
            ),
            outputs=tuple(TensorSpec.from_dict(t, f"{where}: outputs[{i}]") for i, t in enumerate(outputs)),
        )
