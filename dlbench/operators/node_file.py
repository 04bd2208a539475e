"""The node file beside a benchmark's input: ``<input stem>_nodes.json``, written for an executable registered
with ``node_file: true``. Per id it holds the operation's op type, its parameters and, for an operation
extracted from a model, the ONNX node itself (:class:`dlbench.core.nodes.NodeSpec`). Other executables never
see it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dlbench.core.nodes import NodeFormatError, NodeSpec
from dlbench.core.values import Number, Operation
from dlbench.operators.protocol import ProtocolError

NODE_FILE_FORMAT = 1


def nodes_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_nodes.json")


def write_nodes(path: Path, operations: Iterable[Operation]) -> Path:
    """``{"format": 1, "operations": {"<id>": {"op_type", "params": [[descriptor, value], ...], "node"}}}``,
    ``node`` being the ONNX node as :meth:`NodeSpec.to_dict` writes it, or null for an operation that was
    not extracted from a model (a configured benchmark): the executable builds it from the parameters."""
    entries = {
        str(op.id): {
            "op_type": op.op_type,
            "params": [[d, v] for d, v in op.params],
            "node": None if op.node is None else op.node.to_dict(),
        }
        for op in operations
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": NODE_FILE_FORMAT, "operations": entries}), encoding="utf-8")
    return path


@dataclass(frozen=True)
class NodeEntry:
    """One operation of a node file; ``problem`` says why its node did not parse (that row fails alone)."""

    op_type: str
    params: tuple[tuple[str, Number], ...]
    node: NodeSpec | None
    problem: str = ""

    @property
    def param_dict(self) -> dict[str, Number]:
        return {d: v for d, v in self.params if d != "?"}


def read_nodes(path: Path) -> dict[int, NodeEntry]:
    """Parse a node file (see :func:`write_nodes`); a file that is not one raises :class:`ProtocolError`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProtocolError(f"{path}: not a readable node file ({err})") from err
    operations = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(operations, dict) or data.get("format") != NODE_FILE_FORMAT:
        raise ProtocolError(f"{path}: expected {{'format': {NODE_FILE_FORMAT}, 'operations': {{...}}}}")
    entries: dict[int, NodeEntry] = {}
    for key, entry in operations.items():
        where = f"{path}: id {key}"
        try:
            op_id = int(key)
            params = tuple((str(d), v) for d, v in entry.get("params", []))
            op_type = str(entry["op_type"])
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ProtocolError(f"{where}: needs op_type and params ({err})") from err
        try:
            node = None if entry.get("node") is None else NodeSpec.from_dict(entry["node"], where)
            entries[op_id] = NodeEntry(op_type, params, node)
        except NodeFormatError as err:
            entries[op_id] = NodeEntry(op_type, params, None, str(err))
    return entries
