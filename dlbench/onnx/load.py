"""Read an ONNX file: parse, check, verify its weights, and make the light copy that shape inference runs on."""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path
from typing import Any

from dlbench.onnx.errors import ModelSettingError, UnreadableModel

log = logging.getLogger(__name__)

#: Tensors up to this many elements take part in shape computations (values folded, kept for inference).
MAX_FOLDED_ELEMENTS = 1024
#: Bytes per element of the fixed-size ONNX tensor types (TensorProto.DataType values).
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2}


def load_model(path: Path) -> tuple[Any, str]:
    """The parsed ModelProto (external weights not loaded) and the SHA-256 of the file."""
    import onnx
    from google.protobuf.message import DecodeError

    if not path.is_file():
        raise ModelSettingError(f"{path}: no such ONNX file")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise UnreadableModel(f"{path}: not a readable ONNX model (truncated or not ONNX at all): {err}") from err
    if not model.graph.node or not model.opset_import:
        raise UnreadableModel(
            f"{path}: not an ONNX model: the file parsed as protobuf but has "
            f"{len(model.graph.node)} nodes and {len(model.opset_import)} opset imports"
        )
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        # Weights kept beside the model: only their shapes matter here, which the model itself holds.
        log.info("%s: external weight data is not loaded (shapes come from the model file)", path)
    return model, digest


def check_weights(model: Any, path: Path) -> None:
    """Weights the checker no longer sees in the light model: external files exist, raw data is as large
    as the dims say."""
    import onnx

    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if not location or not (path.parent / location).is_file():
                raise UnreadableModel(
                    f"{path}: weight {tensor.name!r} is stored in {location!r} beside the model, "
                    "but that file is missing"
                )
        elif tensor.HasField("raw_data"):
            # ByteSize() counts without copying the data out (reading raw_data would copy every weight)
            itemsize = _ITEMSIZE.get(tensor.data_type)
            needed = math.prod(tensor.dims) * itemsize if itemsize else 0
            if tensor.ByteSize() < needed:
                raise UnreadableModel(
                    f"{path}: weight {tensor.name!r} holds fewer than the {needed} bytes its dims "
                    f"{list(tensor.dims)} need (a damaged file?)"
                )


def light_model(model: Any) -> tuple[Any, set[str]]:
    """A copy for checking and shape inference in which large initializers are graph inputs of the same
    type and shape: inference needs only their shapes, and serializing the weights (twice, once per
    C++ call) would dominate the time. Returns the copy and the names of the moved weights."""
    import onnx

    light = onnx.ModelProto()
    light.ir_version = max(int(model.ir_version), 4)  # IR >= 4: initializers need not be inputs
    light.opset_import.extend(model.opset_import)
    light.producer_name = model.producer_name
    light.producer_version = model.producer_version
    light.functions.extend(model.functions)
    graph, source = light.graph, model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.sparse_initializer.extend(source.sparse_initializer)
    inputs = {value.name for value in source.input}
    graph.input.extend(source.input)
    moved: set[str] = set()
    for tensor in source.initializer:
        if math.prod(tensor.dims) <= MAX_FOLDED_ELEMENTS and tensor.data_location != onnx.TensorProto.EXTERNAL:
            graph.initializer.append(tensor)
            continue
        moved.add(tensor.name)
        if tensor.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light, moved


def check_model(model: Any, path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        raise UnreadableModel(f"{path}: the ONNX checker rejects the model: {first}") from err


def default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0
