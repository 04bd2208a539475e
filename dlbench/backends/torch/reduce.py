"""ReduceMean and ReduceSum over any of the rank-4 dimensions (kept as 1), and LRN, forward and backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import Kernel, Pass, autograd_pass, glue, integer, mode_of


def reduce_kernel(op_type: str) -> Kernel:
    function = torch.mean if op_type == "ReduceMean" else torch.sum

    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        (shape,) = glue(op_type, p).inputs
        dims = [i for i, d in enumerate("NCHW") if integer(p, f"reduce_{d}", 0)]
        x = torch.randn(shape, device=device, dtype=dtype)

        def forward(t: torch.Tensor) -> torch.Tensor:
            # no axis: ONNX's noop_with_empty_axes; torch would reduce everything
            return function(t, dims, keepdim=True) if dims else t.clone()

        if mode_of(p) == 0:
            return Pass(lambda: forward(x), (x,))
        return autograd_pass(forward, [x], [0], copy=True)

    return kernel_fn


def lrn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """Local response normalisation across channels (ONNX's and torch's alpha both divide by ``size``)."""
    (shape,) = glue("LRN", p).inputs
    size = integer(p, "size", 5)
    alpha, beta, bias = float(p.get("alpha", 1e-4)), float(p.get("beta", 0.75)), float(p.get("bias", 1.0))
    x = torch.randn(shape, device=device, dtype=dtype)

    def forward(t: torch.Tensor) -> torch.Tensor:
        return F.local_response_norm(t, size, alpha, beta, bias)

    if mode_of(p) == 0:
        return Pass(lambda: forward(x), (x,))
    return autograd_pass(forward, [x], [0])
