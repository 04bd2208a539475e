"""ONNX operators as eval-mode PyTorch calls on real tensors, for running a whole graph (:mod:`.graph`):
BatchNormalization with its running statistics, pooling without max positions, Dropout as the identity.
Each entry takes the node's attributes and opset and returns ``f(*inputs) -> output or tuple of outputs``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from dlbench.core.dtypes import DTYPE_BYTES, ELEMENT_TYPE_NAMES

Op = Callable[..., Any]
Builder = Callable[[dict[str, Any], int], Op]

#: ONNX TensorProto element types -> torch dtypes
ONNX_DTYPES = {number: getattr(torch, name) for number, name in ELEMENT_TYPE_NAMES.items() if name in DTYPE_BYTES}


class UnsupportedNode(Exception):
    """A node this executor cannot run (the message names the op type and why)."""


def _ints(values: Any) -> list[int]:
    return [int(v) for v in (values.tolist() if isinstance(values, torch.Tensor) else values)]


def _pads(attrs: dict[str, Any], x: torch.Tensor, kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int]) -> list[int]:  # fmt: skip
    """ONNX pads (begin..., end...) of a 2-D window, explicit or from ``auto_pad``."""
    auto = attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    rank = len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(rank):
            size = x.shape[2 + i]
            out = math.ceil(size / strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else large)
            end.append(large if auto == "SAME_UPPER" else small)
        return begin + end
    if auto == "VALID":
        return [0] * (2 * rank)
    return _ints(attrs.get("pads", [0] * (2 * rank)))


def _padded(x: torch.Tensor, pads: list[int], value: float) -> tuple[torch.Tensor, list[int]]:
    """``x`` and the symmetric padding torch takes; asymmetric pads are applied to ``x`` first."""
    rank = len(pads) // 2
    if all(pads[i] == pads[i + rank] for i in range(rank)):
        return x, pads[:rank]
    torch_pads: list[int] = []
    for i in reversed(range(rank)):  # F.pad: last dimension first
        torch_pads += [pads[i], pads[i + rank]]
    return F.pad(x, torch_pads, value=value), [0] * rank


def conv(attrs: dict[str, Any], opset: int) -> Op:
    def run(x, w, b=None):
        kernel = _ints(attrs.get("kernel_shape", w.shape[2:]))
        strides = _ints(attrs.get("strides", [1] * len(kernel)))
        dilations = _ints(attrs.get("dilations", [1] * len(kernel)))
        x, padding = _padded(x, _pads(attrs, x, kernel, strides, dilations), 0.0)
        fn = F.conv1d if len(kernel) == 1 else F.conv2d
        return fn(x, w, b, strides, padding, dilations, int(attrs.get("group", 1)))

    return run


def pool(kind: str) -> Builder:
    def build(attrs: dict[str, Any], opset: int) -> Op:
        kernel = _ints(attrs["kernel_shape"])
        strides = _ints(attrs.get("strides", [1] * len(kernel)))
        ceil = bool(attrs.get("ceil_mode", 0))
        include_pad = bool(attrs.get("count_include_pad", 0))

        def run(x):
            pads = _pads(attrs, x, kernel, strides, [1] * len(kernel))
            if kind == "max":  # eval: no max positions kept (F.max_pool2d's return_indices=False)
                x, padding = _padded(x, pads, -math.inf)
                fn = F.max_pool1d if len(kernel) == 1 else F.max_pool2d
                return fn(x, kernel, strides, padding, ceil_mode=ceil)
            if not include_pad and any(p * 2 > k for p, k in zip(pads, kernel * 2, strict=True)):
                raise UnsupportedNode("AveragePool: padding over half the window without count_include_pad")
            x, padding = _padded(x, pads, 0.0)
            fn = F.avg_pool1d if len(kernel) == 1 else F.avg_pool2d
            return fn(x, kernel, strides, padding, ceil_mode=ceil, count_include_pad=include_pad)

        return run

    return build


def batchnorm(attrs: dict[str, Any], opset: int) -> Op:
    eps = float(attrs.get("epsilon", 1e-5))
    return lambda x, scale, bias, mean, var: F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)


def gemm(attrs: dict[str, Any], opset: int) -> Op:
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))

    def run(a, b, c=None):
        a, b = (a.t() if trans_a else a), (b.t() if trans_b else b)
        if c is None:
            return torch.mm(a, b) * alpha if alpha != 1.0 else torch.mm(a, b)
        return torch.addmm(c, a, b, beta=beta, alpha=alpha)

    return run


def softmax(attrs: dict[str, Any], opset: int) -> Op:
    axis = int(attrs.get("axis", -1 if opset >= 13 else 1))
    if opset >= 13:
        return lambda x: torch.softmax(x, axis)
    return lambda x: torch.softmax(x.flatten(axis if axis >= 0 else x.dim() + axis), -1).reshape(x.shape)


def reshape(attrs: dict[str, Any], opset: int) -> Op:
    allow_zero = int(attrs.get("allowzero", 0))

    def run(x, shape=None):
        dims = _ints(shape if shape is not None else attrs["shape"])
        if not allow_zero:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return x.reshape(dims)

    return run


def flatten(attrs: dict[str, Any], opset: int) -> Op:
    axis = int(attrs.get("axis", 1))
    return lambda x: x.reshape(math.prod(x.shape[: axis if axis >= 0 else axis + x.dim()]), -1)


def _axes(attrs: dict[str, Any], given: Any) -> list[int] | None:
    if given is not None:
        return _ints(given)
    return _ints(attrs["axes"]) if "axes" in attrs else None


def unsqueeze(attrs: dict[str, Any], opset: int) -> Op:
    def run(x, axes=None):
        wanted = _axes(attrs, axes) or []
        rank = x.dim() + len(wanted)
        for axis in sorted(a % rank for a in wanted):
            x = x.unsqueeze(axis)
        return x

    return run


def squeeze(attrs: dict[str, Any], opset: int) -> Op:
    def run(x, axes=None):
        wanted = _axes(attrs, axes)
        if wanted is None:
            return x.squeeze()
        return x.squeeze(tuple(a % x.dim() for a in wanted))

    return run


def slice_(attrs: dict[str, Any], opset: int) -> Op:
    def run(x, starts=None, ends=None, axes=None, steps=None):
        begin = _ints(starts if starts is not None else attrs["starts"])
        end = _ints(ends if ends is not None else attrs["ends"])
        axes_ = _axes(attrs, axes) or list(range(len(begin)))
        step = _ints(steps) if steps is not None else [1] * len(begin)
        index: list[Any] = [slice(None)] * x.dim()
        for b, e, a, s in zip(begin, end, axes_, step, strict=True):
            if s < 1:
                raise UnsupportedNode("Slice with a negative step")
            index[a % x.dim()] = slice(b, e, s)
        return x[tuple(index)]

    return run


def gather(attrs: dict[str, Any], opset: int) -> Op:
    axis = int(attrs.get("axis", 0))

    def run(x, indices):
        ax = axis % x.dim()
        flat = indices.reshape(-1)
        flat = torch.where(flat < 0, flat + x.shape[ax], flat)
        out = x.index_select(ax, flat)
        return out.reshape((*x.shape[:ax], *indices.shape, *x.shape[ax + 1 :]))

    return run


def split(attrs: dict[str, Any], opset: int, outputs: int) -> Op:
    axis = int(attrs.get("axis", 0))

    def run(x, sizes=None):
        parts = _ints(sizes) if sizes is not None else _ints(attrs.get("split", []))
        if not parts:
            size = x.shape[axis]
            parts = [math.ceil(size / outputs)] * (outputs - 1)
            parts.append(size - sum(parts))
        return tuple(torch.split(x, parts, axis))

    return run


def layernorm(attrs: dict[str, Any], opset: int) -> Op:
    axis, eps = int(attrs.get("axis", -1)), float(attrs.get("epsilon", 1e-5))
    return lambda x, w, b=None: F.layer_norm(x, x.shape[axis % x.dim() :], w, b, eps)


def reduce_mean(attrs: dict[str, Any], opset: int) -> Op:
    keep = bool(attrs.get("keepdims", 1))

    def run(x, axes=None):
        dims = _axes(attrs, axes)
        return x.mean(dim=tuple(dims) if dims else tuple(range(x.dim())), keepdim=keep)

    return run


def constant_of_shape(attrs: dict[str, Any], opset: int) -> Op:
    value = attrs.get("value")
    fill = value if isinstance(value, torch.Tensor) else torch.zeros(1)
    return lambda shape: torch.full(_ints(shape), fill.reshape(-1)[0].item(), dtype=fill.dtype)


def div(attrs: dict[str, Any], opset: int) -> Op:
    def run(a, b):
        if a.dtype.is_floating_point:
            return torch.div(a, b)
        return torch.div(a, b, rounding_mode="trunc")

    return run


def variadic(fn: Callable[[Any, Any], Any]) -> Builder:
    def build(attrs: dict[str, Any], opset: int) -> Op:
        def run(*xs):
            out = xs[0]
            for x in xs[1:]:
                out = fn(out, x)
            return out

        return run

    return build


def simple(fn: Callable[..., Any]) -> Builder:
    return lambda attrs, opset: fn


def _shape(attrs: dict[str, Any], opset: int) -> Op:
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return lambda x: torch.tensor(list(x.shape)[start : None if end is None else int(end)], dtype=torch.int64)


def _cast(attrs: dict[str, Any], opset: int) -> Op:
    dtype = ONNX_DTYPES[int(attrs["to"])]
    return lambda x: x.to(dtype)


def _transpose(attrs: dict[str, Any], opset: int) -> Op:
    perm = attrs.get("perm")
    return lambda x: x.permute(*(_ints(perm) if perm is not None else reversed(range(x.dim()))))


def _expand(attrs: dict[str, Any], opset: int) -> Op:
    return lambda x, shape: x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))


def _range(attrs: dict[str, Any], opset: int) -> Op:
    return lambda start, limit, delta: torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


def _lrn(attrs: dict[str, Any], opset: int) -> Op:
    size, alpha = int(attrs["size"]), float(attrs.get("alpha", 1e-4))
    beta, bias = float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    return lambda x: F.local_response_norm(x, size, alpha, beta, bias)


def _concat(attrs: dict[str, Any], opset: int) -> Op:
    axis = int(attrs["axis"])
    return lambda *xs: torch.cat(xs, axis)


def _gather_elements(attrs: dict[str, Any], opset: int) -> Op:
    axis = int(attrs.get("axis", 0))
    return lambda x, i: torch.gather(x, axis, torch.where(i < 0, i + x.shape[axis], i))


def _dropout(attrs: dict[str, Any], opset: int) -> Op:
    return lambda x, *rest: x  # eval mode: the identity (a mask output, when asked for, is not served)


BUILDERS: dict[str, Builder] = {
    "Conv": conv,
    "MaxPool": pool("max"),
    "AveragePool": pool("avg"),
    "GlobalAveragePool": simple(lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)),
    "BatchNormalization": batchnorm,
    "Gemm": gemm,
    "MatMul": simple(torch.matmul),
    "Relu": simple(torch.relu),
    "Sigmoid": simple(torch.sigmoid),
    "Tanh": simple(torch.tanh),
    "Erf": simple(torch.erf),
    "Sqrt": simple(torch.sqrt),
    "Abs": simple(torch.abs),
    "Log": simple(torch.log),
    "Exp": simple(torch.exp),
    "Neg": simple(torch.neg),
    "IsNaN": simple(torch.isnan),
    "Not": simple(torch.logical_not),
    "Identity": simple(lambda x: x),
    "Dropout": _dropout,
    "Add": simple(torch.add),
    "Sub": simple(torch.sub),
    "Mul": simple(torch.mul),
    "Div": div,
    "Pow": simple(torch.pow),
    "Sum": variadic(torch.add),
    "Min": variadic(torch.minimum),
    "Max": variadic(torch.maximum),
    "Equal": simple(torch.eq),
    "Less": simple(torch.lt),
    "LessOrEqual": simple(torch.le),
    "Greater": simple(torch.gt),
    "GreaterOrEqual": simple(torch.ge),
    "And": simple(torch.logical_and),
    "Or": simple(torch.logical_or),
    "Where": simple(torch.where),
    "Softmax": softmax,
    "LRN": _lrn,
    "LayerNormalization": layernorm,
    "ReduceMean": reduce_mean,
    "Reshape": reshape,
    "Flatten": flatten,
    "Unsqueeze": unsqueeze,
    "Squeeze": squeeze,
    "Transpose": _transpose,
    "Concat": _concat,
    "Slice": slice_,
    "Gather": gather,
    "GatherElements": _gather_elements,
    "Expand": _expand,
    "Shape": _shape,
    "Cast": _cast,
    "ConstantOfShape": constant_of_shape,
    "Range": _range,
}
