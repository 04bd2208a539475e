"""Which nodes of a model are operators to measure: constants (weights computed from weights) and layout-only
nodes (views, metadata, no-ops) are classes of their own, kept out of coverage and prediction. The table is
data: add an op type to :data:`LAYOUT_ONLY` and every count follows."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

COMPUTE = "compute"
LAYOUT = "layout"
CONSTANT = "constant"

#: op_type -> why its cost is taken as zero. A framework runs these as views of the same memory, as
#: metadata reads, or not at all; none moves or computes a tensor's elements.
LAYOUT_ONLY: dict[str, str] = {
    "Reshape": "a view: the same elements in the same order",
    "Flatten": "a view: the same elements in the same order",
    "Squeeze": "a view: drops unit dimensions",
    "Unsqueeze": "a view: adds unit dimensions",
    "Shape": "reads tensor metadata, not its elements",
    "Size": "reads tensor metadata, not its elements",
    "Identity": "returns its input",
    "Constant": "a weight, stored in the model",
    "Dropout": "inference Dropout returns its input (no mask is drawn)",
    "Cast": "a cast to the type the tensor already has is a no-op",
}


def _attribute(node: Any, name: str) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            import onnx.helper

            return onnx.helper.get_attribute_value(attr)
    return None


def _is_inference_dropout(node: Any, constant_values: Mapping[str, Any]) -> bool:
    """Opset 12 and later: ``training_mode`` (input 2) absent or a constant false; before: ``is_test``
    (opset <= 6) set, or no attribute at all (opset 7-11 Dropout is an identity at inference)."""
    if len(node.input) > 2 and node.input[2]:
        value = constant_values.get(node.input[2])
        return value is not None and not bool(value)
    is_test = _attribute(node, "is_test")
    return is_test is None or bool(is_test)


def classify_node(
    node: Any,
    input_types: Sequence[int | None],
    constant_values: Mapping[str, Any],
) -> tuple[str, str]:
    """(class, reason) of a node that is not a constant: ``layout`` with the reason its cost is zero, or
    ``compute``. ``input_types`` are the ONNX element types of the inputs (None where unknown);
    ``constant_values`` small constant tensors by name (for Dropout's ``training_mode``)."""
    if node.domain not in ("", "ai.onnx"):
        return COMPUTE, ""
    reason = LAYOUT_ONLY.get(node.op_type)
    if reason is None:
        return COMPUTE, ""
    if node.op_type == "Dropout" and not _is_inference_dropout(node, constant_values):
        return COMPUTE, ""
    if node.op_type == "Cast":
        to = _attribute(node, "to")
        if not input_types or input_types[0] is None or to != input_types[0]:
            return COMPUTE, ""
    return LAYOUT, reason


def constant_outputs(
    graph: Any, weights: Collection[str] = (), shapes: Mapping[str, Any] | None = None
) -> tuple[set[str], set[int]]:
    """Tensors computed only from initializers and constants, and the indices of the nodes computing them
    (in graph order, so a chain such as ``ConstantOfShape -> Unsqueeze`` folds whole): they are weights.

    A node without inputs (Constant, ConstantOfShape of a literal shape, a random initializer) is constant;
    graph inputs are not, even when an initializer gives them a default. ``weights``: initializers moved
    to graph inputs (see :func:`dlbench.onnx.load.light_model`), constant all the same. With ``shapes``
    (every tensor's shape at the dimensions chosen), a Shape or Size of a tensor whose shape is known is a
    constant too: so shape arithmetic and masks built from it (Range, Equal, Where, Expand ...) fold, while
    the Shape node itself stays a layout-only node."""
    constants = {t.name for t in graph.initializer} | set(weights)  # graph inputs fed at run time never are
    nodes: set[int] = set()
    for index, node in enumerate(graph.node):
        inputs = [i for i in node.input if i]
        if all(i in constants for i in inputs) and not _reads_subgraph(node):
            constants.update(o for o in node.output if o)
            nodes.add(index)
        elif shapes is not None and node.op_type in ("Shape", "Size") and shapes.get(inputs[0]) is not None:
            # also of a fed graph input (BERT's Shape(input_ids) -> Gather -> Unsqueeze -> the Slice of its
            # position ids): that Slice was measured with an unknown end and onnxruntime had no row for it
            constants.update(o for o in node.output if o)
    return constants, nodes


def _reads_subgraph(node: Any) -> bool:
    """Control flow (If/Loop/Scan) may read outer tensors from inside its bodies: never folded."""
    import onnx

    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
