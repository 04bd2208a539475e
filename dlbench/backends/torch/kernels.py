"""The embedded PyTorch kernels by op type (``python -m dlbench.backends.torch OP INPUT.csv``). Each kernel builds
its tensors once per row and returns the callable that is timed: the operator itself (forward, or the aten
backward op training runs)."""

from __future__ import annotations

import torch

from dlbench.backends.torch.amp import amp_unscale, amp_update_scale
from dlbench.backends.torch.arithmetic import binary_kernel, power, variadic_kernel, where
from dlbench.backends.torch.conv import conv
from dlbench.backends.torch.elementwise import add, relu, softmax
from dlbench.backends.torch.gemm import gemm
from dlbench.backends.torch.logic import FUNCTIONS as LOGIC
from dlbench.backends.torch.logic import logic_kernel
from dlbench.backends.torch.loss import bce_with_logits, mse_loss, nll_loss
from dlbench.backends.torch.movement import concat, expand, gather, gather_elements, slice_, split, tile, transpose
from dlbench.backends.torch.norm import batchnorm, layernorm
from dlbench.backends.torch.optim import clip_grad_norm, optimizer_kernel, zero_grad
from dlbench.backends.torch.params import Kernel
from dlbench.backends.torch.pointwise import FUNCTIONS, cast, gelu, pointwise_kernel
from dlbench.backends.torch.pool import global_avg_pool, pool_kernel
from dlbench.backends.torch.reduce import lrn, reduce_kernel
from dlbench.backends.torch.training_ops import cross_entropy, dispatch
from dlbench.core.settings import ROW_DTYPES

KERNELS: dict[str, Kernel] = {
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": gemm,
    "BatchNormalization": batchnorm,
    "Relu": relu,
    "MaxPool": pool_kernel("max"),
    "AveragePool": pool_kernel("avg"),
    "GlobalAveragePool": global_avg_pool,
    "Add": add,
    "Softmax": softmax,
    "LayerNormalization": layernorm,
    # the training step's optimizer and loss, as the script ran them
    **{op_type: optimizer_kernel(op_type) for op_type in ("SGD", "Adam", "AdamW", "RMSprop")},
    "ZeroGrad": zero_grad,
    "ClipGradNorm": clip_grad_norm,
    "SoftmaxCrossEntropyLoss": cross_entropy,
    "MSELoss": mse_loss,
    "BCEWithLogitsLoss": bce_with_logits,
    "NLLLoss": nll_loss,
    "FrameworkOverhead": dispatch,
    # GradScaler's unscale with its inf/NaN check, and its scale update
    "AmpUnscale": amp_unscale,
    "AmpUpdateScale": amp_update_scale,
    # the glue of real networks
    **{op_type: pointwise_kernel(op_type) for op_type in FUNCTIONS},
    "Gelu": gelu,
    "Cast": cast,
    **{op_type: binary_kernel(op_type) for op_type in ("Mul", "Div", "Sub")},
    "Pow": power,
    **{op_type: variadic_kernel(op_type) for op_type in ("Sum", "Max", "Min")},
    "Where": where,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Transpose": transpose,
    "Gather": gather,
    "Expand": expand,
    "Tile": tile,
    "ReduceMean": reduce_kernel("ReduceMean"),
    "ReduceSum": reduce_kernel("ReduceSum"),
    "LRN": lrn,
    "GatherElements": gather_elements,
    **{op_type: logic_kernel(op_type) for op_type in LOGIC},
}

#: every dtype a row may run in (``dtype=`` takes the first three)
DTYPES = {name: getattr(torch, name) for name in ROW_DTYPES}
