"""PyTorch operator kernels behind the executable protocol: ``python -m dlbench.backends.torch_kernels
OP INPUT.csv``. Each operator builds its tensors once per row, then times only the operator itself
(forward, or the aten backward op training runs), with the device synchronised. A row whose tensors
would not fit in ``DLBENCH_MEMORY_FRACTION`` of the free memory is skipped before anything is allocated."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from dlbench.backends.timing import TimingSettings, time_repeated
from dlbench.ops import DESCRIPTORS
from dlbench.protocol import output_path_for, read_input

aten = torch.ops.aten
Kernel = Callable[[dict[str, float], torch.device, torch.dtype], Callable[[], object]]


class UnsupportedRow(ValueError):
    """This row's parameters cannot run (the message says why); other rows go on."""


def _i(p: dict[str, float], key: str, default: int | None = None) -> int:
    if key not in p:
        if default is None:
            raise UnsupportedRow(f"missing parameter {key}")
        return default
    value = p[key]
    if not float(value).is_integer():
        raise UnsupportedRow(f"{key}={value} is not an integer")
    return int(value)


def _positive(p: dict[str, float], *keys: str) -> None:
    for key in keys:
        if _i(p, key, 1) < 1:
            raise UnsupportedRow(f"{key}={p.get(key)} must be >= 1")


def _shape4(p: dict[str, float], suffix: str = "") -> tuple[int, int, int, int]:
    _positive(p, *(f"{d}{suffix}" for d in "NCHW"))
    return tuple(_i(p, f"{d}{suffix}", 1) for d in "NCHW")  # type: ignore[return-value]


def _randn(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device=device, dtype=dtype, requires_grad=grad)


def _window(p: dict[str, float]) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = [_i(p, "kernel_shape_0"), _i(p, "kernel_shape_1")]
    strides = [_i(p, "strides_0", 1), _i(p, "strides_1", 1)]
    pads = [_i(p, f"pads_{i}", 0) for i in range(4)]
    dil = [_i(p, "dilations_0", 1), _i(p, "dilations_1", 1)]
    if min(kernel) < 1 or min(strides) < 1 or min(dil) < 1 or min(pads) < 0:
        raise UnsupportedRow("kernel, strides and dilations must be >= 1, pads >= 0")
    return kernel, strides, pads, dil


def _padded(x: torch.Tensor, pads: list[int], value: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """Symmetric pads go to the operator; asymmetric ones are applied once, outside the timed region."""
    if pads[0] == pads[2] and pads[1] == pads[3]:
        return x, [pads[0], pads[1]]
    return F.pad(x, (pads[1], pads[3], pads[0], pads[2]), value=value).detach(), [0, 0]


def conv(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    n, c, h, w = _shape4(p)
    _positive(p, "K")
    k, groups, mode = _i(p, "K"), _i(p, "group", 1), _i(p, "mode", 0)
    kernel, strides, pads, dil = _window(p)
    if groups < 1 or c % groups or k % groups:
        raise UnsupportedRow(f"C={c} and K={k} must be divisible by group={groups}")
    eff = [dil[i] * (kernel[i] - 1) + 1 for i in range(2)]
    if h + pads[0] + pads[2] < eff[0] or w + pads[1] + pads[3] < eff[1]:
        raise UnsupportedRow(f"kernel {kernel} (dilated {eff}) is larger than the padded input {h}x{w}")
    x, padding = _padded(_randn((n, c, h, w), device, dtype), pads)
    weight = _randn((k, c // groups, *kernel), device, dtype)
    if mode == 0:
        return lambda: F.conv2d(x, weight, None, strides, padding, dil, groups)
    if mode not in (1, 2):
        raise UnsupportedRow(f"mode={mode}: Conv has 0 forward, 1 backward-data, 2 backward-weights")
    grad = torch.randn_like(F.conv2d(x, weight, None, strides, padding, dil, groups))
    mask = [mode == 1, mode == 2, False]
    return lambda: aten.convolution_backward(grad, x, weight, None, strides, padding, dil, False, [0, 0], groups, mask)


def gemm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    _positive(p, "M", "K", "N", "batch")
    m, k, n, batch = _i(p, "M"), _i(p, "K"), _i(p, "N"), _i(p, "batch", 1)
    trans_a, trans_b = bool(_i(p, "transA", 0)), bool(_i(p, "transB", 0))
    lead = (batch,) if batch > 1 else ()
    a = _randn((*lead, *((k, m) if trans_a else (m, k))), device, dtype)
    b = _randn((*lead, *((n, k) if trans_b else (k, n))), device, dtype)
    a_op = a.transpose(-1, -2) if trans_a else a
    b_op = b.transpose(-1, -2) if trans_b else b
    return lambda: torch.matmul(a_op, b_op)


def batchnorm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    n, c, h, w = _shape4(p)
    eps, momentum, mode = float(p.get("epsilon", 1e-5)), float(p.get("momentum", 0.9)), _i(p, "mode", 0)
    x = _randn((n, c, h, w), device, dtype)
    weight, bias = torch.ones(c, device=device, dtype=dtype), torch.zeros(c, device=device, dtype=dtype)
    mean, var = torch.zeros(c, device=device, dtype=dtype), torch.ones(c, device=device, dtype=dtype)
    # ONNX momentum weighs the running value; torch's weighs the new batch statistic.
    torch_momentum = 1.0 - momentum if momentum > 0.5 else momentum
    if mode in (0, 2):
        training = mode == 0
        return lambda: F.batch_norm(x, mean, var, weight, bias, training, torch_momentum, eps)
    if mode != 1:
        raise UnsupportedRow(f"mode={mode}: BatchNormalization has 0 forward-training, 1 backward, 2 inference")
    _, save_mean, save_invstd = aten.native_batch_norm(x, weight, bias, mean, var, True, torch_momentum, eps)
    grad = torch.randn_like(x)
    return lambda: aten.native_batch_norm_backward(
        grad, x, weight, mean, var, save_mean, save_invstd, True, eps, [True, True, True]
    )


def relu(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x = _randn(_shape4(p), device, dtype)
    mode = _i(p, "mode", 0)
    if mode == 0:
        return lambda: torch.relu(x)
    y, grad = torch.relu(x), torch.randn_like(x)
    return lambda: aten.threshold_backward(grad, y, 0)


def _pool(kind: str) -> Kernel:
    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
        n, c, h, w = _shape4(p)
        kernel, strides, pads, _ = _window(p)
        mode = _i(p, "mode", 0)
        pad_value = -math.inf if kind == "max" else 0.0
        if max(pads) * 2 > min(kernel) or not (pads[0] == pads[2] and pads[1] == pads[3]):
            x, padding = _padded(_randn((n, c, h, w), device, dtype), pads, pad_value)
        else:
            x, padding = _randn((n, c, h, w), device, dtype), [pads[0], pads[1]]
        if x.shape[2] < kernel[0] or x.shape[3] < kernel[1]:
            raise UnsupportedRow(f"kernel {kernel} is larger than the padded input {h}x{w}")
        if kind == "max":
            out, indices = aten.max_pool2d_with_indices(x, kernel, strides, padding)
            if mode == 0:
                return lambda: aten.max_pool2d_with_indices(x, kernel, strides, padding)
            grad = torch.randn_like(out)
            return lambda: aten.max_pool2d_with_indices_backward(
                grad, x, kernel, strides, padding, [1, 1], False, indices
            )
        if mode == 0:
            # ONNX's AveragePool (count_include_pad=0 by default) and oneDNN exclude the padding
            return lambda: F.avg_pool2d(x, kernel, strides, padding, count_include_pad=False)
        grad = torch.randn_like(F.avg_pool2d(x, kernel, strides, padding, count_include_pad=False))
        return lambda: aten.avg_pool2d_backward(grad, x, kernel, strides, padding, False, False, None)

    return kernel_fn


def global_avg_pool(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x = _randn(_shape4(p), device, dtype)
    if _i(p, "mode", 0) == 0:
        return lambda: F.adaptive_avg_pool2d(x, 1)
    grad = torch.randn_like(F.adaptive_avg_pool2d(x, 1))
    return lambda: aten._adaptive_avg_pool2d_backward(grad, x)


def add(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    a_shape, b_shape = _shape4(p), _shape4(p, "_b")
    try:
        torch.broadcast_shapes(a_shape, b_shape)
    except RuntimeError as err:
        raise UnsupportedRow(f"shapes {a_shape} and {b_shape} do not broadcast") from err
    a, b = _randn(a_shape, device, dtype), _randn(b_shape, device, dtype)
    return lambda: torch.add(a, b)


def _axis(p: dict[str, float]) -> int:
    axis = _i(p, "axis", -1)
    if not -4 <= axis < 4:
        raise UnsupportedRow(f"axis={axis} is outside a rank-4 tensor")
    return axis % 4


def softmax(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x, axis = _randn(_shape4(p), device, dtype), _axis(p)
    if _i(p, "mode", 0) == 0:
        return lambda: torch.softmax(x, axis)
    y, grad = torch.softmax(x, axis), torch.randn_like(x)
    return lambda: aten._softmax_backward_data(grad, y, axis, dtype)


def layernorm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    x, axis = _randn(_shape4(p), device, dtype), _axis(p)
    eps = float(p.get("epsilon", 1e-5))
    shape = list(x.shape[axis:])
    weight, bias = torch.ones(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)
    if _i(p, "mode", 0) == 0:
        return lambda: F.layer_norm(x, shape, weight, bias, eps)
    _, mean, rstd = aten.native_layer_norm(x, shape, weight, bias, eps)
    grad = torch.randn_like(x)
    return lambda: aten.native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias, [True, True, True])


def sgd(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    """The optimizer step of one parameter tensor, in place as training runs it: SGD with momentum,
    ``buf = 0.9 buf + grad; param -= lr buf``. (An out-of-place Add allocates a fresh output per call and
    overestimates this several times over.)"""
    shape = _shape4(p)
    param, grad, buf = (_randn(shape, device, dtype) for _ in range(3))

    def update() -> None:
        buf.mul_(0.9).add_(grad)
        param.add_(buf, alpha=-1e-6)

    return update


KERNELS: dict[str, Kernel] = {
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": gemm,
    "BatchNormalization": batchnorm,
    "Relu": relu,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": global_avg_pool,
    "Add": add,
    "Softmax": softmax,
    "LayerNormalization": layernorm,
    "SGD": sgd,
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
INDEX_BYTES = 8  # int64 indices of max pooling


def _out_size(size: int, kernel: int, pad_total: int, stride: int, dilation: int = 1) -> int:
    return max(1, (size + pad_total - dilation * (kernel - 1) - 1) // max(stride, 1) + 1)


def tensor_bytes(op_type: str, p: dict[str, float], element_size: int) -> int:
    """An upper estimate of the bytes the kernel for ``op_type`` allocates for one row: inputs, outputs,
    gradients and the temporaries made while building them. Invalid parameters raise UnsupportedRow."""
    if op_type in ("Gemm", "MatMul"):
        _positive(p, "M", "K", "N", "batch")
        m, k, n, batch = _i(p, "M"), _i(p, "K"), _i(p, "N"), _i(p, "batch", 1)
        return batch * (m * k + k * n + m * n) * element_size
    n, c, h, w = _shape4(p)
    x = n * c * h * w
    mode = _i(p, "mode", 0)
    if op_type == "Conv":
        _positive(p, "K")
        kernel, strides, pads, dil = _window(p)
        k, groups = _i(p, "K"), max(_i(p, "group", 1), 1)
        padded = n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
        weight = k * max(c // groups, 1) * kernel[0] * kernel[1]
        ho = _out_size(h, kernel[0], pads[0] + pads[2], strides[0], dil[0])
        wo = _out_size(w, kernel[1], pads[1] + pads[3], strides[1], dil[1])
        out = n * k * ho * wo
        elements = x + padded + weight + out if mode == 0 else x + padded + weight + 2 * out + max(padded, weight)
        return elements * element_size
    if op_type in ("MaxPool", "AveragePool"):
        kernel, strides, pads, _ = _window(p)
        padded = n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
        ho = _out_size(h, kernel[0], pads[0] + pads[2], strides[0])
        wo = _out_size(w, kernel[1], pads[1] + pads[3], strides[1])
        out = n * c * ho * wo
        indices = 2 * out * INDEX_BYTES if op_type == "MaxPool" else 0
        return (x + 2 * padded + 3 * out) * element_size + indices
    if op_type == "Add":
        b_shape = _shape4(p, "_b")
        b = b_shape[0] * b_shape[1] * b_shape[2] * b_shape[3]
        out = max(n, b_shape[0]) * max(c, b_shape[1]) * max(h, b_shape[2]) * max(w, b_shape[3])
        return (x + b + out) * element_size
    if op_type == "SGD":
        return 3 * x * element_size  # parameter, gradient, momentum buffer
    # elementwise and normalisations: input, output, and in backward a gradient and a saved result
    return (2 if mode == 0 or op_type == "GlobalAveragePool" else 4) * x * element_size


def free_memory(device: torch.device) -> int:
    """Bytes that can be allocated now on ``device`` without swapping or an out-of-memory kill."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def _size(n_bytes: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= factor:
            return f"{n_bytes / factor:.1f} {unit}"
    return f"{int(n_bytes)} B"


def memory_problem(needed: int, free: int, fraction: float) -> str:
    """Why a row is skipped, or empty when ``needed`` bytes fit in ``fraction`` of ``free``."""
    if needed <= fraction * free:
        return ""
    return f"needs {_size(needed)}, over {fraction:.0%} of the {_size(free)} free; skipped"


def _memory_fraction_from_env() -> float:
    text = os.environ.get("DLBENCH_MEMORY_FRACTION", "0.8")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise SystemExit(f"DLBENCH_MEMORY_FRACTION={text!r}: use a fraction in (0, 1]")
    return value


def _device_from_env() -> torch.device:
    name = os.environ.get("DLBENCH_DEVICE", "cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("dlbench torch kernels: DLBENCH_DEVICE=cuda but torch sees no CUDA device")
    return torch.device(name)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in KERNELS:
        print(f"usage: python -m dlbench.backends.torch_kernels {{{','.join(KERNELS)}}} INPUT.csv", file=sys.stderr)
        return 2
    op_type, input_path = args[0], Path(args[1])
    descriptors = DESCRIPTORS[op_type]
    threads = int(os.environ.get("DLBENCH_THREADS", "0"))
    if threads > 0:
        torch.set_num_threads(threads)
    device = _device_from_env()
    dtype_name = os.environ.get("DLBENCH_DTYPE", "float32")
    if dtype_name not in DTYPES:
        print(f"DLBENCH_DTYPE={dtype_name!r}: use one of {', '.join(DTYPES)}", file=sys.stderr)
        return 2
    dtype = DTYPES[dtype_name]
    settings = TimingSettings.from_env()
    memory_fraction = _memory_fraction_from_env()
    element_size = torch.empty((), dtype=dtype).element_size()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    try:
        rows = read_input(input_path)
    except (OSError, ValueError) as err:
        print(f"cannot read {input_path}: {err}", file=sys.stderr)
        return 2
    failed = 0
    with output_path_for(input_path).open("w", encoding="utf-8") as out, torch.inference_mode(False), torch.no_grad():
        out.write("id,ms,min,max,mean,std,iqr,reps\n")
        out.flush()
        for op_id, values in rows:
            try:
                if len(values) != len(descriptors):
                    raise UnsupportedRow(
                        f"{len(values)} parameters, {op_type} takes {len(descriptors)}: {', '.join(descriptors)}"
                    )
                params = dict(zip(descriptors, values, strict=True))
                skip = memory_problem(tensor_bytes(op_type, params, element_size), free_memory(device), memory_fraction)
                if skip:
                    failed += 1
                    print(f"id {op_id}: {skip}", file=sys.stderr, flush=True)
                    continue
                fn = KERNELS[op_type](params, device, dtype)
                timing = time_repeated(fn, settings, sync)
                del fn  # free this row's tensors before the next row is sized
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # else the caching allocator's hold shows as used memory
            except (UnsupportedRow, RuntimeError, MemoryError) as err:
                failed += 1
                print(f"id {op_id}: {op_type} cannot run: {err}", file=sys.stderr, flush=True)
                continue
            s = timing.stats
            if timing.budget_spent:
                print(
                    f"id {op_id}: time budget of {settings.budget_s:g} s spent after {s.reps} repetitions "
                    f"(min_reps {settings.min_reps}); the measurement is kept",
                    file=sys.stderr,
                    flush=True,
                )
            out.write(
                f"{op_id},{s.median_ms!r},{s.min_ms!r},{s.max_ms!r},{s.mean_ms!r},{s.std_ms!r},{s.iqr_ms!r},{s.reps}\n"
            )
            out.flush()
    return 1 if failed and failed == len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
