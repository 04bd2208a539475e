"""Boolean results: comparisons (Equal, Greater, Less, GreaterOrEqual, LessOrEqual), logic (And, Or, Xor,
Not) and predicates (IsNaN, IsInf), with ONNX broadcasting. They have no gradient: forward only."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlbench.backends.torch.params import Kernel, Pass, UnsupportedRow, glue, integer

FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "Equal": torch.eq,
    "Greater": torch.gt,
    "Less": torch.lt,
    "GreaterOrEqual": torch.ge,
    "LessOrEqual": torch.le,
    "And": torch.logical_and,
    "Or": torch.logical_or,
    "Xor": torch.logical_xor,
    "Not": torch.logical_not,
    "IsNaN": torch.isnan,
    "IsInf": torch.isinf,
}


def logic_kernel(op_type: str) -> Kernel:
    function = FUNCTIONS[op_type]

    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        if integer(p, "mode", 0) != 0:
            raise UnsupportedRow(f"mode={p.get('mode')}: {op_type} has a boolean result and no gradient")
        tensors = glue(op_type, p)
        inputs = [
            _operand(op_type, shape, kind, device, dtype)
            for shape, kind in zip(tensors.inputs, tensors.kinds, strict=True)
        ]
        return Pass(lambda: function(*inputs), tuple(inputs))

    return kernel_fn


def _operand(op_type: str, shape: tuple[int, ...], kind: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if kind == "bool":
        return torch.rand(shape, device=device) < 0.5
    if op_type == "Equal":  # small whole numbers: about half the pairs are equal, as in masks built from positions
        return torch.randint(0, 2, shape, device=device).to(dtype)
    return torch.randn(shape, device=device, dtype=dtype)
