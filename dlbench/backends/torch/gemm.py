"""Gemm and (batched) MatMul with optional transposes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlbench.backends.torch.params import integer, positive, randn


def gemm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    positive(p, "M", "K", "N", "batch")
    m, k, n, batch = integer(p, "M"), integer(p, "K"), integer(p, "N"), integer(p, "batch", 1)
    trans_a, trans_b = bool(integer(p, "transA", 0)), bool(integer(p, "transB", 0))
    lead = (batch,) if batch > 1 else ()
    a = randn((*lead, *((k, m) if trans_a else (m, k))), device, dtype)
    b = randn((*lead, *((n, k) if trans_b else (k, n))), device, dtype)
    a_op = a.transpose(-1, -2) if trans_a else a
    b_op = b.transpose(-1, -2) if trans_b else b
    return lambda: torch.matmul(a_op, b_op)
