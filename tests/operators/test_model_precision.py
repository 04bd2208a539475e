"""A model's operations (``task=benchmark_model``) take ``amp=`` and ``channels_last=`` as an operator sweep does:
autocast's lower-precision ops of a real exported ResNet in bfloat16, their bytes at two per element, the CNN's
4-D ops in channels_last, and the rest as they were."""

from __future__ import annotations

from onnx_models import exported

from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.operators.workload import with_precision


def test_a_resnet_under_bf16_autocast_and_channels_last() -> None:
    forward = deduplicate(extract_operations(exported("resnet"), 2).operations())
    ran = with_precision(forward, "float32", "bf16", True, "cpu")
    by_type = {}
    for before, after in zip(forward, ran, strict=True):
        by_type.setdefault(after.op_type, set()).add((after.dtype, after.memory_format))
        if after.op_type == "Conv":
            assert after.bytes_moved == before.bytes_moved / 2, "bytes at 2 per element"
    assert by_type["Conv"] == {("bfloat16", "channels_last")}
    assert by_type["Gemm"] == {("bfloat16", "")}
    assert by_type["Relu"] == {("", "channels_last")}  # its inputs' dtype: the sweep's float32
    assert with_precision(forward, "float32", "none", False, "cpu") == forward
