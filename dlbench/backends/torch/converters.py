"""The converters onnx2torch (1.5.15) lacks, registered in its own registry before a model is converted:

- the newer versions of ops whose change was only new element types (``LessOrEqual``-16 of GPT-2,
  ``GreaterOrEqual``-16 of BERT, ``Reshape``-19/21 of any export at torch's default opset 20, ...): the
  converter of the version before;
- the newer versions that added an attribute or an input (``Pad``-18 axes, ``Split``-18 num_outputs, ...):
  the converter of the version before where the node does not use the addition, a named refusal where it does;
- the reductions of opset 18, whose axes became an input: the same module as before from the constant axes;
- ``Reshape`` with ``allowzero=1`` (torch.onnx.export's default exporter writes it): a 0 in the shape is a
  zero-sized dimension, not a copied one; versions 19 and 21 (new element types) as 14;
- ``Flatten`` on its ``axis`` (onnx2torch's flattens from axis 1 whatever the attribute; ``graph.py`` makes
  each Flatten of a static shape a Reshape, this one serves the others: GPT-2's of a 1-D tensor);
- ``AveragePool`` with asymmetric pads (inception_v1): the input padded, each window's sum divided by the
  elements it covers, as onnxruntime computes it. onnx2torch refuses it; its ``MaxPool`` pads with -inf.

Importing this module imports nothing heavy; :func:`register` needs onnx2torch imported (``graph.py`` does it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: (op type, version onnx2torch lacks) -> the registered version whose converter computes it (the change was
#: only new element types, or an addition :data:`GUARDS` refuses)
SAME_AS = {
    ("GreaterOrEqual", 16): 12, ("LessOrEqual", 16): 12, ("Equal", 19): 13,
    ("Cast", 19): 13, ("Cast", 21): 13,
    ("Constant", 19): 13, ("Constant", 21): 13, ("ConstantOfShape", 20): 9, ("ConstantOfShape", 21): 9,
    ("Identity", 19): 16, ("Identity", 21): 16, ("IsInf", 20): 10, ("IsNaN", 20): 13,
    ("Shape", 19): 15, ("Shape", 21): 15, ("Transpose", 21): 13, ("Unsqueeze", 21): 13,
    ("Pad", 18): 13, ("Pad", 19): 13, ("Pad", 21): 13, ("Split", 18): 13,
    ("Resize", 18): 13, ("Resize", 19): 13, ("ScatterND", 18): 16,
}  # fmt: skip
#: the reductions whose axes became an input at opset 18 (ReduceMax and ReduceMin again at 20: booleans)
REDUCTIONS = {"ReduceL1": (18,), "ReduceL2": (18,), "ReduceLogSum": (18,), "ReduceLogSumExp": (18,),
              "ReduceMax": (18, 20), "ReduceMean": (18,), "ReduceMin": (18, 20), "ReduceProd": (18,),
              "ReduceSumSquare": (18,)}  # fmt: skip


def _unused_addition(node: Any) -> str | None:
    """Why the converter of the version before cannot compute ``node`` (an addition it uses), or None."""
    attrs, inputs = node.attributes, node.input_values
    problems = {
        "Pad": ((len(inputs) > 3 and bool(inputs[3])) or attrs.get("mode") == "wrap", "an axes input or mode=wrap"),
        "Split": ("num_outputs" in attrs, "num_outputs"),
        "Resize": (
            bool(attrs.get("antialias", 0))
            or "axes" in attrs
            or attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch"
            or attrs.get("coordinate_transformation_mode") == "half_pixel_symmetric",
            "antialias, axes, keep_aspect_ratio_policy or half_pixel_symmetric",
        ),
        "ScatterND": (attrs.get("reduction", "none") in ("max", "min"), "reduction=max/min"),
    }
    used, what = problems.get(node.operation_type, (False, ""))
    return f"{node.operation_type} with {what} is not converted" if used else None


def _guarded(converter: Callable[..., Any]) -> Callable[..., Any]:
    def convert(node: Any, graph: Any) -> Any:
        problem = _unused_addition(node)
        if problem:
            raise NotImplementedError(problem)
        return converter(node, graph)

    return convert


def _reduce_with_axes_input(node: Any, graph: Any) -> Any:
    """A reduction of opset 18 or later (axes an input, constant once the graph is folded) as onnx2torch's
    module of the reductions before it."""
    from onnx2torch.node_converters.reduce import OnnxReduceStaticAxes
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult, get_const_value

    axes = None
    if len(node.input_values) > 1 and node.input_values[1]:
        try:
            axes = [int(a) for a in get_const_value(node.input_values[1], graph).tolist()]
        except KeyError as err:
            raise NotImplementedError(f"{node.operation_type} with axes computed in the graph") from err
    if not axes and node.attributes.get("noop_with_empty_axes", 0):
        raise NotImplementedError(f"{node.operation_type} with noop_with_empty_axes=1 and no axes")
    module = OnnxReduceStaticAxes(operation_type=node.operation_type, axes=axes,
                                  keepdims=node.attributes.get("keepdims", 1))  # fmt: skip
    return OperationConverterResult(torch_module=module,
                                    onnx_mapping=OnnxMapping(inputs=(node.input_values[0],),
                                                             outputs=node.output_values))  # fmt: skip


def _padded_average_pool_module(kernel: list[int], strides: list[int], pads: list[int], shape: list[int],
                                count_include_pad: bool) -> Any:  # fmt: skip
    import torch
    import torch.nn.functional as F
    from onnx2torch.utils.common import OnnxToTorchModule

    rank = len(kernel)
    pool = {2: F.avg_pool2d, 3: F.avg_pool3d}[rank]
    torch_pads = [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]

    class PaddedAveragePool(torch.nn.Module, OnnxToTorchModule):
        """ONNX AveragePool with asymmetric pads: each window's sum over the zero-padded input divided by the
        elements of the input it covers (count_include_pad=0), or by the window's size (=1)."""

        def __init__(self) -> None:
            super().__init__()
            ones = torch.ones((1, 1, *shape[2:]))
            counts = pool(F.pad(ones, torch_pads), kernel, strides, divisor_override=1)
            if count_include_pad:
                counts = torch.full_like(counts, math.prod(kernel))
            self.register_buffer("divisor", counts)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return pool(F.pad(x, torch_pads), kernel, strides, divisor_override=1) / self.divisor

    return PaddedAveragePool()


def _average_pool(symmetric: Callable[..., Any]) -> Callable[..., Any]:
    """AveragePool: onnx2torch's converter where the pads are symmetric, :class:`PaddedAveragePool` where not."""

    def convert(node: Any, graph: Any) -> Any:
        from onnx2torch.utils.common import OperationConverterResult, get_shape_from_value_info, onnx_mapping_from_node

        attrs = node.attributes
        shape = get_shape_from_value_info(graph.value_info[node.input_values[0]])
        rank = len(shape) - 2
        pads = list(attrs.get("pads", [0] * 2 * rank))
        if any(d != 1 for d in attrs.get("dilations", [1] * rank)):
            raise NotImplementedError("AveragePool with dilations is not converted")
        if pads[:rank] == pads[rank:] or attrs.get("auto_pad", "NOTSET") != "NOTSET":
            return symmetric(node, graph)
        if attrs.get("ceil_mode", 0) or rank not in (2, 3):
            raise NotImplementedError("AveragePool with asymmetric pads is converted for 2-D and 3-D, floor mode")
        kernel = list(attrs["kernel_shape"])
        strides = list(attrs.get("strides", [1] * rank))
        module = _padded_average_pool_module(kernel, strides, pads, shape, bool(attrs.get("count_include_pad", 0)))
        return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node=node))

    return convert


def _reshape(allowing_zero_not: Callable[..., Any]) -> Callable[..., Any]:
    """Reshape: onnx2torch's converter where ``allowzero`` is 0; where it is 1, a reshape to the shape as given."""

    def convert(node: Any, graph: Any) -> Any:
        import torch
        from onnx2torch.utils.common import OnnxToTorchModule, OperationConverterResult, onnx_mapping_from_node

        if not node.attributes.get("allowzero", 0):
            return allowing_zero_not(node, graph)

        class ReshapeAllowingZero(torch.nn.Module, OnnxToTorchModule):
            def forward(self, x: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
                return torch.reshape(x, [int(d) for d in shape.tolist()])

        return OperationConverterResult(torch_module=ReshapeAllowingZero(), onnx_mapping=onnx_mapping_from_node(node))

    return convert


def _flatten(node: Any, graph: Any) -> Any:
    """ONNX Flatten: a 2-D reshape at ``axis`` (negative axes count from the end)."""
    import torch
    from onnx2torch.utils.common import OnnxToTorchModule, OperationConverterResult, onnx_mapping_from_node

    axis = int(node.attributes.get("axis", 1))

    class Flatten(torch.nn.Module, OnnxToTorchModule):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            at = axis % (x.dim() + 1) if axis < 0 else axis
            return x.reshape(math.prod(x.shape[:at]), math.prod(x.shape[at:]))

    return OperationConverterResult(torch_module=Flatten(), onnx_mapping=onnx_mapping_from_node(node=node))


_REGISTERED: list[bool] = []


def register() -> None:
    """Adds the converters above to onnx2torch's registry (once per process)."""
    if _REGISTERED:
        return
    from onnx2torch.node_converters import registry

    table = registry._CONVERTER_REGISTRY  # noqa: SLF001 - the one place onnx2torch keeps its converters
    for (op_type, version), before in SAME_AS.items():
        key = registry.OperationDescription(domain="", operation_type=op_type, version=version)
        if key not in table:
            table[key] = _guarded(registry.get_converter(op_type, before))
    for op_type, versions in REDUCTIONS.items():
        for version in versions:
            key = registry.OperationDescription(domain="", operation_type=op_type, version=version)
            table.setdefault(key, _reduce_with_axes_input)
    for version in (1, 9, 11, 13, 21):
        table[registry.OperationDescription(domain="", operation_type="Flatten", version=version)] = _flatten
    reshape = registry.get_converter("Reshape", 14)
    for version in (14, 19, 21):
        table[registry.OperationDescription(domain="", operation_type="Reshape", version=version)] = _reshape(reshape)
    symmetric = {version: registry.get_converter("AveragePool", min(version, 11)) for version in (7, 10, 11, 19)}
    for version, converter in symmetric.items():
        key = registry.OperationDescription(domain="", operation_type="AveragePool", version=version)
        table[key] = _average_pool(converter)
    _REGISTERED.append(True)
