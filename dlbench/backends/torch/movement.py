"""Data movement: Concat, Split, Slice, Transpose, Gather, Expand and Tile, forward and backward. Every pass
writes its outputs (:func:`materialized`), as the ONNX operator does, where PyTorch would hand out a view."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import Pass, aten, autograd_pass, glue, integer, materialized, mode_of


def _inputs(op_type: str, p: dict[str, float], device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.randn(s, device=device, dtype=dtype) for s in glue(op_type, p).float_inputs]


def concat(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    inputs, axis = _inputs("Concat", p, device, dtype), integer(p, "axis", 0) % 4

    def forward(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.cat(tensors, axis)

    if mode_of(p) == 0:
        return Pass(lambda: forward(*inputs), tuple(inputs))
    return autograd_pass(forward, inputs, list(range(len(inputs))), copy=True)


def split(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    tensors = glue("Split", p)
    axis = integer(p, "axis", 0) % 4
    sizes = [s[axis] for s in tensors.outputs]
    (x,) = _inputs("Split", p, device, dtype)

    def forward(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(t, sizes, axis)

    if mode_of(p) == 0:
        return Pass(lambda: materialized(forward(x)), (x,))
    return autograd_pass(forward, [x], [0])


def slice_(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """The output's extent from the start of every axis; one sliced axis times aten's slice_backward."""
    (out,) = glue("Slice", p).outputs
    (x,) = _inputs("Slice", p, device, dtype)
    index = tuple(slice(0, n) for n in out)
    if mode_of(p) == 0:
        return Pass(lambda: x[index].contiguous(), (x,))
    sliced = [d for d in range(4) if out[d] != x.shape[d]]
    if len(sliced) == 1:
        dim, grad = sliced[0], torch.randn(out, device=device, dtype=dtype)
        return Pass(lambda: aten.slice_backward(grad, list(x.shape), dim, 0, out[dim], 1), (x,), (grad,))
    return autograd_pass(lambda t: t[index], [x], [0])


def transpose(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    glue("Transpose", p)
    perm = [integer(p, f"perm_{i}", i) for i in range(4)]
    (x,) = _inputs("Transpose", p, device, dtype)
    if mode_of(p) == 0:
        return Pass(lambda: x.permute(perm).contiguous(), (x,))
    return autograd_pass(lambda t: t.permute(perm), [x], [0], copy=True)


def gather(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """Rows of a table (an embedding: 2-D data, axis 0) run as PyTorch's embedding and its aten backward;
    any other axis as index_select. Indices are uniform over the axis."""
    tensors = glue("Gather", p)
    data_shape, (count,) = tensors.inputs
    axis = integer(p, "axis", 0) % 4
    indices = torch.randint(0, data_shape[axis], (count,), device=device)
    mode = mode_of(p)
    if axis == 2 and data_shape[0] == data_shape[1] == 1:
        table = torch.randn(data_shape[2:], device=device, dtype=dtype)
        if mode == 0:
            return Pass(lambda: F.embedding(indices, table), (table, indices))
        grad = torch.randn(count, data_shape[3], device=device, dtype=dtype)
        rows = data_shape[2]
        return Pass(lambda: aten.embedding_dense_backward(grad, indices, rows, -1, False), (table, indices), (grad,))
    data = torch.randn(data_shape, device=device, dtype=dtype)
    if mode == 0:
        return Pass(lambda: torch.index_select(data, axis, indices), (data, indices))
    return autograd_pass(lambda t, i: torch.index_select(t, axis, i), [data, indices], [0])


def gather_elements(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """torch.gather with indices uniform over the axis; its gradient scatters back (autograd's scatter_add)."""
    tensors = glue("GatherElements", p)
    data_shape, index_shape = tensors.inputs
    axis = integer(p, "axis", 0) % 4
    data = torch.randn(data_shape, device=device, dtype=dtype)
    indices = torch.randint(0, data_shape[axis], index_shape, device=device)
    if mode_of(p) == 0:
        return Pass(lambda: torch.gather(data, axis, indices), (data, indices))
    return autograd_pass(lambda t, i: torch.gather(t, axis, i), [data, indices], [0])


def expand(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    (out,) = glue("Expand", p).outputs
    (x,) = _inputs("Expand", p, device, dtype)
    if mode_of(p) == 0:
        return Pass(lambda: x.expand(out).contiguous(), (x,))
    return autograd_pass(lambda t: t.expand(out), [x], [0])


def tile(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    glue("Tile", p)
    repeats = [integer(p, f"repeats_{i}", 1) for i in range(4)]
    (x,) = _inputs("Tile", p, device, dtype)
    if mode_of(p) == 0:
        return Pass(lambda: x.repeat(repeats), (x,))
    return autograd_pass(lambda t: t.repeat(repeats), [x], [0])
