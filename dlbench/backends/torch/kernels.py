"""The embedded PyTorch kernels by op type (``python -m dlbench.backends.torch OP INPUT.csv``). Each kernel builds
its tensors once per row and returns the callable that is timed: the operator itself (forward, or the aten
backward op training runs)."""

from __future__ import annotations

import torch

from dlbench.backends.torch.conv import conv
from dlbench.backends.torch.elementwise import add, relu, sgd, softmax
from dlbench.backends.torch.gemm import gemm
from dlbench.backends.torch.norm import batchnorm, layernorm
from dlbench.backends.torch.params import Kernel
from dlbench.backends.torch.pool import global_avg_pool, pool_kernel
from dlbench.backends.torch.training_ops import cross_entropy, dispatch

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
    "SGD": sgd,
    "SoftmaxCrossEntropyLoss": cross_entropy,
    "FrameworkOverhead": dispatch,
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
