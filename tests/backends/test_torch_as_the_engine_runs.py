"""An extracted operation is benchmarked as the torch inference engine runs it in the pass: a ceil-mode pool keeps
its last, partial windows (torchvision's MaxPool2d(3, 2, ceil_mode=True)), and a convolution with a bias input
adds it (onnx2torch's 1x1 convolutions copy the bias into the output first)."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torch.profiler import profile

from dlbench.backends.onnxruntime.canonical import canonical_node
from dlbench.backends.onnxruntime.model import build_model
from dlbench.backends.torch import kernels as tk
from dlbench.backends.whole_model.run import torch_engine
from dlbench.onnx.describe import describe_known
from dlbench.onnx.extract import extract_operations

CPU = torch.device("cpu")


def exported(module: nn.Module, path: Path, shape: tuple[int, ...]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), (torch.randn(shape),), str(path), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, dynamo=False, opset_version=17,
        )  # fmt: skip
    return path


def onnxruntime_shapes(model: bytes, feeds: dict) -> list[tuple[int, ...]]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [tuple(out.shape) for out in session.run(None, feeds)]


@pytest.mark.parametrize("training", [False, True])
def test_a_ceil_mode_max_pool_keeps_its_partial_windows_as_onnxruntime_does(tmp_path: Path, training: bool) -> None:
    # 8x8, window 3, stride 2: floor mode has 3 windows per axis, ceil mode a 4th that starts at 6
    path = exported(nn.Sequential(nn.Conv2d(3, 8, 1), nn.MaxPool2d(3, 2, ceil_mode=True)), tmp_path / "m.onnx",
                    (1, 3, 8, 8))  # fmt: skip
    (pool,) = [op for op in extract_operations(path, 2, training=training).operations() if op.op_type == "MaxPool"]
    params = pool.param_dict
    assert params["ceil_mode"] == 1 and params["mode"] == (0 if training else 2)
    x = torch.randn(2, 3, 8, 8)
    (model_out,) = onnxruntime_shapes(onnx.load(str(path)).SerializeToString(), {"x": x.numpy()})
    assert model_out == (2, 8, 4, 4)
    benchmarked = tk.KERNELS["MaxPool"](params, CPU, torch.float32)()
    benchmarked = benchmarked[0] if training else benchmarked  # training keeps the max positions too
    assert tuple(benchmarked.shape) == model_out
    if not training:  # onnxruntime's own benchmark: the operation's canonical node
        built = build_model(canonical_node("MaxPool", params))
        assert onnxruntime_shapes(built.model, built.feeds) == [model_out]


def test_a_ceil_mode_that_adds_no_window_is_described_as_floor_mode() -> None:
    # 9x9, window 3, stride 2: 4 windows per axis either way, the same problem as floor mode's
    x = torch.randn(1, 2, 9, 9)
    assert nn.functional.max_pool2d(x, 3, 2, ceil_mode=True).shape == nn.functional.max_pool2d(x, 3, 2).shape
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    assert dict(describe_known("MaxPool", [(1, 2, 9, 9)], attrs, 17, False))["ceil_mode"] == 0
    assert dict(describe_known("MaxPool", [(1, 2, 8, 8)], attrs, 17, False))["ceil_mode"] == 1


def aten_calls(call) -> set[str]:
    call()  # warm: the first call's one-off work is not the pass's
    with profile() as prof:
        call()
    return {event.name for event in prof.events() if event.name.startswith("aten::")}


@pytest.mark.parametrize("bias", [True, False])
def test_a_convolution_is_benchmarked_with_its_bias_as_the_engine_runs_it(tmp_path: Path, bias: bool) -> None:
    path = exported(nn.Conv2d(8, 16, 1, bias=bias), tmp_path / "conv.onnx", (2, 8, 6, 6))
    (conv,) = extract_operations(path, 2, training=False).operations()
    assert conv.param_dict["has_bias"] == int(bias)
    engine, _ = torch_engine(onnx.load(str(path)), {"x": torch.randn(2, 8, 6, 6).numpy()}, 1)
    benchmark = tk.KERNELS["Conv"](conv.param_dict, CPU, torch.float32)
    with torch.no_grad():  # as the torch backend runs every row
        benchmarked = aten_calls(benchmark)
    engine_calls = aten_calls(engine)
    # the 1x1 convolution's slow path: a biased one copies the bias into its output first
    assert ("aten::copy_" in engine_calls) == bias
    assert benchmarked == engine_calls
    assert len(canonical_node("Conv", conv.param_dict).inputs) == (3 if bias else 2)
