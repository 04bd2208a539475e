"""The embedded PyTorch kernels compute the problem their descriptors pose, checked numerically against a
plain torch reference (autograd for the backward modes) on the very tensors the timed callable uses.

A kernel builds its tensors once and returns the callable that is timed; the tensors it closes over are
read back here (by name), the reference is computed from them and from the descriptors alone, and the
callable's result must agree. float64, so agreement is tight."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from dlbench.backends.torch import kernels as tk

CPU, F64 = torch.device("cpu"), torch.float64


def captured(fn: Callable[[], object]) -> dict[str, object]:
    """The variables the timed callable closes over: the tensors it computes with (a ``Pass``'s own callable)."""
    fn = getattr(fn, "run", fn)
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ()), strict=True))


def unpadded(x: torch.Tensor, p: dict[str, float]) -> torch.Tensor:
    """The operator's input inside a tensor the kernel may have padded once, outside the timed region."""
    h, w = int(p["H"]), int(p["W"])
    if x.shape[2:] == (h, w):
        return x
    top, left = int(p["pads_0"]), int(p["pads_1"])
    return x[:, :, top : top + h, left : left + w]


def onnx_pad(x: torch.Tensor, p: dict[str, float], value: float = 0.0) -> torch.Tensor:
    return F.pad(x, (int(p["pads_1"]), int(p["pads_3"]), int(p["pads_0"]), int(p["pads_2"])), value=value)


def close(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


CONV = dict(N=2, C=4, H=9, W=8, K=6, kernel_shape_0=3, kernel_shape_1=2, strides_0=2, strides_1=1,
            dilations_0=1, dilations_1=2, group=2)  # fmt: skip
CONV_PADS = {
    "symmetric": dict(pads_0=1, pads_1=1, pads_2=1, pads_3=1),
    "asymmetric": dict(pads_0=1, pads_1=0, pads_2=2, pads_3=1),
}


@pytest.mark.parametrize("bias", [0, 1])
@pytest.mark.parametrize("pads", sorted(CONV_PADS))
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_conv_forward_backward_data_and_backward_weights(mode: int, pads: str, bias: int) -> None:
    torch.manual_seed(mode)
    p = {**CONV, **CONV_PADS[pads], "has_bias": bias, "mode": mode}
    fn = tk.conv(p, CPU, F64)
    names = captured(fn)
    x = unpadded(names["x"], p).clone().requires_grad_()
    weight = names["weight"].clone().requires_grad_()
    # the forward adds the kernel's bias; no gradient depends on its values
    b = (names["bias"] if mode == 0 else torch.zeros(6, dtype=F64)).clone().requires_grad_() if bias else None
    y = F.conv2d(onnx_pad(x, p), weight, b, (2, 1), 0, (1, 2), 2)
    result = fn()
    if mode == 0:
        close(result, y)
        return
    y.backward(names["grad"])
    if mode == 1:
        close(unpadded(result[0], p), x.grad)
        assert result[1] is None and result[2] is None
    else:  # a biased layer's backward-weights call reduces the bias gradient too
        close(result[1], weight.grad)
        assert result[0] is None
        if bias:
            close(result[2], b.grad)
        else:
            assert result[2] is None


@pytest.mark.parametrize(("trans_a", "trans_b", "batch"), [(0, 0, 1), (1, 0, 1), (0, 1, 3), (1, 1, 2)])
@pytest.mark.parametrize("op_type", ["Gemm", "MatMul"])
def test_gemm_multiplies_the_operands_its_transpose_flags_describe(
    op_type: str, trans_a: int, trans_b: int, batch: int
) -> None:
    fn = tk.KERNELS[op_type](dict(M=5, K=7, N=3, transA=trans_a, transB=trans_b, batch=batch), CPU, F64)
    names = captured(fn)
    # the operands as stored: K x M for transA, N x K for transB, each contiguous as a framework holds it
    a = names["a_op"].transpose(-1, -2) if trans_a else names["a_op"]
    b = names["b_op"].transpose(-1, -2) if trans_b else names["b_op"]
    assert a.is_contiguous() and b.is_contiguous()
    assert a.shape[-2:] == ((7, 5) if trans_a else (5, 7)) and b.shape[-2:] == ((3, 7) if trans_b else (7, 3))
    assert a.shape[:-2] == b.shape[:-2] == ((batch,) if batch > 1 else ())
    spec = f"...{'km' if trans_a else 'mk'},...{'nk' if trans_b else 'kn'}->...mn"
    close(fn(), torch.einsum(spec, a, b))


BN = dict(N=3, C=4, H=5, W=6, epsilon=1e-3, momentum=0.9)


def test_batchnorm_training_forward_normalizes_by_batch_statistics_and_updates_running_ones() -> None:
    fn = tk.batchnorm({**BN, "mode": 0}, CPU, F64)
    names = captured(fn)
    x = names["x"]
    mean = x.mean((0, 2, 3), keepdim=True)
    var = x.var((0, 2, 3), unbiased=False, keepdim=True)
    close(fn(), (x - mean) / torch.sqrt(var + 1e-3))
    # ONNX momentum 0.9 keeps 90% of the running mean (which started at 0)
    close(names["mean"], 0.1 * mean.flatten())


def test_batchnorm_inference_uses_the_running_statistics() -> None:
    fn = tk.batchnorm({**BN, "mode": 2}, CPU, F64)
    x = captured(fn)["x"]
    close(fn(), x / math.sqrt(1.0 + 1e-3))  # running mean 0, variance 1, weight 1, bias 0


def test_batchnorm_backward_gives_the_autograd_gradients_of_input_scale_and_shift() -> None:
    fn = tk.batchnorm({**BN, "mode": 1}, CPU, F64)
    names = captured(fn)
    x = names["x"].clone().requires_grad_()
    weight = torch.ones(4, dtype=F64, requires_grad=True)
    bias = torch.zeros(4, dtype=F64, requires_grad=True)
    F.batch_norm(x, None, None, weight, bias, True, 0.1, 1e-3).backward(names["grad"])
    dx, dweight, dbias = fn()
    close(dx, x.grad)
    close(dweight, weight.grad)
    close(dbias, bias.grad)


def test_relu_forward_and_backward() -> None:
    shape = dict(N=2, C=3, H=4, W=5)
    forward = tk.relu({**shape, "mode": 0}, CPU, F64)
    x = captured(forward)["x"]
    close(forward(), torch.where(x > 0, x, torch.zeros_like(x)))
    backward = tk.relu({**shape, "mode": 1}, CPU, F64)
    names = captured(backward)
    # the kernel keeps relu's output y; relu at y has the same gradient as at x (y > 0 exactly where x > 0)
    y = names["y"].clone().requires_grad_()
    torch.relu(y).backward(names["grad"])
    close(backward(), y.grad)
    assert bool((backward() == 0).any()) and bool((backward() != 0).any())


POOL = dict(N=2, C=3, H=9, W=8, kernel_shape_0=3, kernel_shape_1=2, strides_0=2, strides_1=2)
POOL_PADS = {
    "none": dict(pads_0=0, pads_1=0, pads_2=0, pads_3=0),
    "symmetric": dict(pads_0=1, pads_1=1, pads_2=1, pads_3=1),
    "asymmetric": dict(pads_0=0, pads_1=1, pads_2=1, pads_3=0),
}


def avg_pool_excluding_pads(x: torch.Tensor, p: dict[str, float]) -> torch.Tensor:
    """ONNX AveragePool (count_include_pad=0): the sum of the window over the input elements it covers."""
    window, stride = (int(p["kernel_shape_0"]), int(p["kernel_shape_1"])), (int(p["strides_0"]), int(p["strides_1"]))
    sums = F.avg_pool2d(onnx_pad(x, p), window, stride, divisor_override=1)
    counts = F.avg_pool2d(onnx_pad(torch.ones_like(x), p), window, stride, divisor_override=1)
    return sums / counts


def pool_reference(kind: str, x: torch.Tensor, p: dict[str, float]) -> torch.Tensor:
    if kind == "max":
        window = (int(p["kernel_shape_0"]), int(p["kernel_shape_1"]))
        return F.max_pool2d(onnx_pad(x, p, -math.inf), window, (int(p["strides_0"]), int(p["strides_1"])))
    return avg_pool_excluding_pads(x, p)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize(("kind", "pads"), [(k, p) for k in ("max", "avg") for p in sorted(POOL_PADS)])
def test_pooling_forward_and_backward(kind: str, pads: str, mode: int) -> None:
    torch.manual_seed(mode)
    p = {**POOL, **POOL_PADS[pads], "mode": mode}
    fn = tk.KERNELS["MaxPool" if kind == "max" else "AveragePool"](p, CPU, F64)
    names = captured(fn)
    x = unpadded(names["x"], p).clone().requires_grad_()
    y = pool_reference(kind, x, p)
    result = fn()
    if mode == 0:
        close(result[0] if kind == "max" else result, y)
        return
    y.backward(names["grad"])
    close(unpadded(result, p), x.grad)


def test_global_average_pool_forward_and_backward() -> None:
    shape = dict(N=2, C=3, H=4, W=5)
    forward = tk.global_avg_pool({**shape, "mode": 0}, CPU, F64)
    x = captured(forward)["x"]
    close(forward(), x.mean((2, 3), keepdim=True))
    backward = tk.global_avg_pool({**shape, "mode": 1}, CPU, F64)
    names = captured(backward)
    x = names["x"].clone().requires_grad_()
    F.adaptive_avg_pool2d(x, 1).backward(names["grad"])
    close(backward(), x.grad)


@pytest.mark.parametrize(("b_shape"), [(2, 3, 4, 5), (1, 3, 1, 1), (2, 1, 4, 1)])
def test_add_broadcasts_the_second_operand(b_shape: tuple[int, ...]) -> None:
    p = dict(N=2, C=3, H=4, W=5, N_b=b_shape[0], C_b=b_shape[1], H_b=b_shape[2], W_b=b_shape[3])
    fn = tk.add(p, CPU, F64)
    a, b = captured(fn)["a"], captured(fn)["b"]
    assert tuple(b.shape) == b_shape
    close(fn(), a + b.expand(2, 3, 4, 5))


@pytest.mark.parametrize("axis", [1, 3, -1])
def test_softmax_forward_and_backward_along_the_described_axis(axis: int) -> None:
    shape = dict(N=2, C=3, H=4, W=5, axis=axis)
    forward = tk.softmax({**shape, "mode": 0}, CPU, F64)
    x = captured(forward)["x"]
    e = torch.exp(x - x.amax(axis, keepdim=True))
    close(forward(), e / e.sum(axis, keepdim=True))
    backward = tk.softmax({**shape, "mode": 1}, CPU, F64)
    names = captured(backward)
    # softmax(log y) = y, and its gradient depends on y only: autograd through log y is the reference
    logits = torch.log(names["y"]).clone().requires_grad_()
    torch.softmax(logits, axis).backward(names["grad"])
    close(backward(), logits.grad)


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_layernorm_forward_and_backward_over_the_trailing_axes(axis: int) -> None:
    shape = dict(N=2, C=3, H=4, W=5, axis=axis, epsilon=1e-4)
    dims = tuple(range(axis, 4))
    forward = tk.layernorm({**shape, "mode": 0}, CPU, F64)
    x = captured(forward)["x"]
    mean, var = x.mean(dims, keepdim=True), x.var(dims, unbiased=False, keepdim=True)
    close(forward(), (x - mean) / torch.sqrt(var + 1e-4))
    backward = tk.layernorm({**shape, "mode": 1}, CPU, F64)
    names = captured(backward)
    x = names["x"].clone().requires_grad_()
    normalized = list(x.shape[axis:])
    weight = torch.ones(normalized, dtype=F64, requires_grad=True)
    bias = torch.zeros(normalized, dtype=F64, requires_grad=True)
    F.layer_norm(x, normalized, weight, bias, 1e-4).backward(names["grad"])
    dx, dweight, dbias = backward()
    close(dx, x.grad)
    close(dweight, weight.grad)
    close(dbias, bias.grad)


@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("pads", sorted(POOL_PADS))
@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_inference_pooling_matches_onnxruntimes_pool_in_floor_and_ceil_mode(
    op_type: str, pads: str, ceil_mode: int
) -> None:
    """The ONNX reference itself: onnxruntime's pool (AveragePool: count_include_pad=0) on the same input; at
    8x7 a 3x2 window of stride 2 has a last, partial window that only ceil mode keeps."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    p = {**POOL, "H": 8, "W": 7, **POOL_PADS[pads], "ceil_mode": ceil_mode, "mode": 2}
    fn = tk.KERNELS[op_type](p, CPU, torch.float32)
    x = unpadded(captured(fn)["x"], p).contiguous()
    node = helper.make_node(
        op_type, ["x"], ["y"], kernel_shape=[int(p["kernel_shape_0"]), int(p["kernel_shape_1"])],
        strides=[int(p["strides_0"]), int(p["strides_1"])], pads=[int(p[f"pads_{i}"]) for i in range(4)],
        ceil_mode=ceil_mode,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(fn(), torch.from_numpy(expected), rtol=1e-5, atol=1e-6)
