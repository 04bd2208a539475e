"""A whole ONNX graph as a real PyTorch module in eval mode, built by the maintained converter ``onnx2torch``:
the torch side of a bare ONNX file's end-to-end inference latency. What depends only on weights and on the
(fixed) input shapes is folded into constants first, as an eager PyTorch model holds its buffers and
computes shapes as Python numbers (and as onnxruntime folds them when it builds a session)."""

from __future__ import annotations

import sys
import types
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

#: ops whose output is not a function of their inputs: never folded
NOT_FOLDED = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})  # fmt: skip


class UnsupportedModel(Exception):
    """The converter cannot build a module of this model (an op it has no converter for, another domain)."""


@contextmanager
def _torchvision_stand_in() -> Iterator[None]:
    """onnx2torch imports torchvision for two detection ops only (NonMaxSuppression, RoiAlign). Where no
    torchvision that matches the installed torch can be imported (PyPI has no CPU build of it), a stand-in
    lets the converter load; a model with one of those two ops is then refused when it runs them. The stand-in
    is in ``sys.modules`` only while onnx2torch is imported (it keeps what it took): other libraries in the same
    process (transformers looks torchvision up with ``find_spec``) never see it."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a torchvision built for another torch fails with RuntimeError, not ImportError
        pass
    else:
        yield
        return
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]

    def missing(*_args: object, **_kwargs: object) -> None:
        raise UnsupportedModel("NonMaxSuppression and RoiAlign need torchvision, which is not installed")

    package, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
    ops.nms = ops.roi_align = ops.batched_nms = missing  # type: ignore[attr-defined]
    package.ops = ops  # type: ignore[attr-defined]
    sys.modules["torchvision"], sys.modules["torchvision.ops"] = package, ops
    try:
        yield
    finally:
        for name, module in (("torchvision.ops", ops), ("torchvision", package)):
            if sys.modules.get(name) is module:
                del sys.modules[name]


def _static_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    shapes = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _evaluate(node: Any, inputs: list[np.ndarray | None], opsets: Any) -> list[np.ndarray]:
    """One node computed by ONNX's reference implementation (the specification's own semantics), or where
    that cannot (a gap of the reference), by onnxruntime."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if name else "" for k, name in enumerate(node.input)]
    single = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    single.attribute.extend(node.attribute)
    feeds = {n: v for n, v in zip(names, inputs, strict=True) if n}
    inputs_info = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                                 np.shape(v)) for n, v in feeds.items()]  # fmt: skip
    outputs_info = [helper.make_empty_tensor_value_info(f"o{k}") for k in range(len(node.output))]
    model = helper.make_model(helper.make_graph([single], "fold", inputs_info, outputs_info),
                              opset_imports=list(opsets))  # fmt: skip
    try:
        return list(ReferenceEvaluator(model).run(None, feeds))
    except Exception:  # noqa: BLE001 - e.g. the reference's GatherElements on broadcast indices
        import onnxruntime as ort

        model.ir_version = min(model.ir_version, 10)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return list(session.run(None, {n: np.asarray(v) for n, v in feeds.items()}))


def _shape_of(node: Any, shape: tuple[int, ...]) -> np.ndarray:
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.array(shape[start:end], dtype=np.int64)


def _flatten_as_reshape(node: Any, shape: tuple[int, ...], constants: dict[str, Any]) -> Any:
    from onnx import helper

    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % (len(shape) + 1)
    target = f"{node.output[0]}__flattened_shape"
    constants[target] = np.array([int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))], dtype=np.int64)
    return helper.make_node("Reshape", [node.input[0], target], [node.output[0]], name=node.name)


def fold_constants(model: Any) -> Any:
    """A copy of ``model`` whose nodes computable from its weights and its static shapes are initializers,
    whose inference Dropouts are Identity and whose Flattens are Reshapes to their static shapes."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    shapes = _static_shapes(model)
    kept = []
    for node in graph.node:
        ready = all(not name or name in constants for name in node.input)
        if node.op_type == "Dropout" and not any(name in read for name in node.output[1:]):
            # inference: Dropout is the identity (its mask unused), whichever opset's spelling the model has
            kept.append(onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
        elif node.op_type == "Flatten" and node.input[0] in shapes:
            # a Reshape to the static 2-D shape: onnx2torch's Flatten takes every axis for 1
            kept.append(_flatten_as_reshape(node, shapes[node.input[0]], constants))
        elif node.op_type == "Shape" and node.input[0] in shapes:
            constants[node.output[0]] = _shape_of(node, shapes[node.input[0]])
        elif ready and node.op_type not in NOT_FOLDED and node.domain in ("", "ai.onnx"):
            try:
                values = _evaluate(node, [constants[n] if n else None for n in node.input], model.opset_import)
            except Exception:  # noqa: BLE001 - the reference cannot compute it here: the module computes it
                kept.append(node)
                continue
            constants.update((name, value) for name, value in zip(node.output, values, strict=False) if name)
        else:
            kept.append(node)
    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    folded.ir_version = max(int(model.ir_version), 4)
    del folded.graph.node[:], folded.graph.initializer[:], folded.graph.input[:]
    folded.graph.node.extend(kept)
    folded.graph.input.extend(v for v in graph.input if v.name not in constants)
    folded.graph.initializer.extend(numpy_helper.from_array(np.asarray(constants[n]), n) for n in sorted(used)
                                    if n in constants)  # fmt: skip
    return folded


def torch_module(model: Any) -> tuple[Any, dict[str, int]]:
    """``model`` (every input dimension fixed) as an eval-mode ``torch.nn.Module`` taking the graph inputs
    in order, and the nodes it runs per call by op type (with the converters of
    :mod:`dlbench.backends.torch.converters` besides onnx2torch's own). Raises :class:`UnsupportedModel` naming the ops
    the converter has no converter for."""
    folded = fold_constants(model)
    try:
        with _torchvision_stand_in():
            import onnx2torch
            from onnx2torch.node_converters import get_converter
    except ImportError as err:
        raise UnsupportedModel("onnx2torch is not installed: pip install --no-deps 'onnx2torch>=1.5.15'") from err
    from dlbench.backends.torch.converters import register

    register()  # the converters onnx2torch lacks (newer opsets' versions, asymmetric AveragePool)

    opsets = {i.domain or "": int(i.version) for i in folded.opset_import}
    missing = set()
    for node in folded.graph.node:
        try:
            get_converter(node.op_type, opsets.get(node.domain or "", 1), node.domain or "")
        except NotImplementedError:
            missing.add(node.op_type + (f" ({node.domain})" if node.domain else ""))
    if missing:
        raise UnsupportedModel(f"onnx2torch has no converter for {', '.join(sorted(missing))}")
    try:
        module = onnx2torch.convert(folded).eval()
    except Exception as err:  # noqa: BLE001 - a converter's failure names the model's node; report it as such
        text = " ".join((str(err).strip() or type(err).__name__).splitlines()[:2])
        raise UnsupportedModel(f"onnx2torch cannot convert it: {text}") from err
    return module, dict(Counter(node.op_type for node in folded.graph.node))
