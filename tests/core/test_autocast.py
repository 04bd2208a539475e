"""dlbench's copy of autocast's op lists against PyTorch's own: the lists its test suite checks autocast with
(read from the installed torch's source, without importing it) and autocast itself on this CPU."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dlbench.core import autocast

TORCH_LISTS = Path(torch.__file__).parent / "testing" / "_internal" / "autocast_test_lists.py"


def _torch_lists(class_name: str) -> dict[str, set[str]]:
    """``self.<list> = [("name", ...), ...]`` of ``class_name`` in torch's test lists: the op names by list."""
    tree = ast.parse(TORCH_LISTS.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    lists: dict[str, set[str]] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            target = node.targets[0]
            if isinstance(target, ast.Attribute):
                names = {
                    e.elts[0].value
                    for e in node.value.elts
                    if isinstance(e, ast.Tuple) and isinstance(e.elts[0], ast.Constant)
                }
                lists[target.attr] = {n for n in names if isinstance(n, str)}
    return lists


@pytest.mark.skipif(not TORCH_LISTS.exists(), reason="this torch ships no autocast test lists")
def test_every_op_torch_checks_autocast_with_is_in_the_same_list_here() -> None:
    cuda = _torch_lists("AutocastTestLists")
    cpu = _torch_lists("AutocastCPUTestLists")
    lower_cuda = cuda["torch_fp16"] | cuda["nn_fp16"] | cuda.get("linalg_fp16", set()) | cuda["methods_fp16"]
    assert lower_cuda <= autocast.LOWER_PRECISION_ATEN["cuda"]
    assert cuda["torch_fp32"] | cuda["nn_fp32"] | cuda["methods_fp32"] <= autocast.FLOAT32_ATEN["cuda"]
    assert cuda["torch_need_autocast_promote"] <= autocast.PROMOTE_ATEN["cuda"]
    assert cpu["torch_16"] | cpu["nn_16"] <= autocast.LOWER_PRECISION_ATEN["cpu"]
    assert cpu["torch_fp32"] | cpu["nn_fp32"] <= autocast.FLOAT32_ATEN["cpu"]
    assert cpu["torch_need_autocast_promote"] <= autocast.PROMOTE_ATEN["cpu"]


def test_onnx_op_types_get_the_dtype_cpu_autocast_really_gives_them() -> None:
    x, w = torch.randn(2, 4, 6, 6), torch.randn(4, 4, 3, 3)
    rows, target = torch.randn(4, 8), torch.zeros(4, dtype=torch.long)
    calls = {
        "Conv": lambda: F.conv2d(x, w),
        "MatMul": lambda: rows @ rows.T,
        "Gemm": lambda: F.linear(rows, rows),
        "SoftmaxCrossEntropyLoss": lambda: F.cross_entropy(rows, target),
        "MSELoss": lambda: F.mse_loss(rows.bfloat16(), rows.bfloat16()),
        "Softmax": lambda: torch.softmax(rows.bfloat16(), -1),  # its inputs' dtype on the CPU
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ran = {op_type: str(call().dtype).removeprefix("torch.") for op_type, call in calls.items()}
    for op_type, dtype in ran.items():
        assert (autocast.autocast_dtype(op_type, "bf16", "cpu") or "bfloat16") == dtype, op_type


def test_softmax_and_layer_norm_are_float32_only_under_cuda_autocast() -> None:
    assert autocast.autocast_dtype("LayerNormalization", "fp16", "cuda") == "float32"
    assert autocast.autocast_dtype("aten::_softmax", "bf16", "cuda:0") == "float32"
    assert autocast.autocast_dtype("LayerNormalization", "bf16", "cpu") is None
    assert autocast.autocast_dtype("aten::addmm", "fp16", "cuda") == "float16"
    assert autocast.autocast_dtype("Conv", "none", "cuda") is None


def test_an_unknown_amp_value_names_the_choices() -> None:
    with pytest.raises(ValueError, match="amp='fp8': use one of none, bf16, fp16"):
        autocast.lower_precision_dtype("fp8")
