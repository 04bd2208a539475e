"""Autocast's op lists, the one copy in dlbench: which operators ``torch.autocast`` runs in the lower precision
(bfloat16 or float16), which it runs in float32, and which at the widest input type, per device, by aten name
and by ONNX op type; and the ``amp=`` key's values. Everything else runs in the dtype of its inputs.

From PyTorch's "Automatic Mixed Precision" reference (``aten/src/ATen/autocast_mode.cpp``, as
``torch.testing._internal.autocast_test_lists`` checks them): on CUDA softmax, layer norm, the losses and the
exponentials go to float32; on the CPU only the losses and a few pooling, padding and linear-algebra ops do,
so a bfloat16 activation reaches softmax and layer norm in bfloat16. No torch import: the training side
(``training/``) and the operator sweeps read it alike."""

from __future__ import annotations

#: ``amp=`` key -> the lower-precision dtype (``core/dtypes.py`` names); ``none``: no autocast
AMP_DTYPES: dict[str, str | None] = {"none": None, "bf16": "bfloat16", "fp16": "float16"}
AMP_MODES = tuple(AMP_DTYPES)

_MATMULS = frozenset({
    "addmm", "addmv", "addr", "addbmm", "baddbmm", "bmm", "mm", "mv", "matmul", "linear", "linalg_vecdot",
    "chain_matmul", "linalg_multi_dot", "einsum", "_addmm_activation", "__matmul__",
})  # fmt: skip
_CONVOLUTIONS = frozenset({
    "_convolution", "convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "cudnn_convolution_transpose",
    "mkldnn_convolution", "prelu",
})  # fmt: skip
_LOSSES = frozenset({
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy_loss",
    "ctc_loss", "hinge_embedding_loss", "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss",
    "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "nll_loss2d", "poisson_nll_loss",
    "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss",
})  # fmt: skip

#: aten names autocast runs in the lower precision, per device
LOWER_PRECISION_ATEN: dict[str, frozenset[str]] = {
    "cuda": _MATMULS | _CONVOLUTIONS | frozenset({
        "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
        "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
    }),
    "cpu": _MATMULS | _CONVOLUTIONS | frozenset({
        "mkldnn_rnn", "scaled_dot_product_attention", "_native_multi_head_attention",
    }),
}  # fmt: skip
#: aten names autocast runs in float32, per device
FLOAT32_ATEN: dict[str, frozenset[str]] = {
    "cuda": _LOSSES | frozenset({
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow", "__pow__", "__rpow__", "__rdiv__", "__rtruediv__", "softplus", "softmax", "_softmax",
        "log_softmax", "_log_softmax", "layer_norm",
        "native_layer_norm", "rms_norm", "group_norm", "native_group_norm", "norm", "normalize",
        "cosine_similarity", "cumprod", "cumsum", "dist", "pdist", "cdist", "prod", "renorm", "sum", "logsumexp",
    }),
    "cpu": _LOSSES | frozenset({
        "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "max_unpool2d", "max_unpool3d", "grid_sampler", "polar",
        "prod", "quantile", "nanquantile", "stft", "cdist", "trace", "reflection_pad1d", "reflection_pad2d",
        "replication_pad1d", "replication_pad2d", "replication_pad3d", "fractional_max_pool2d",
        "fractional_max_pool3d", "adaptive_max_pool3d", "cholesky", "inverse", "pinverse", "qr", "svd",
    }),
}  # fmt: skip
#: aten names autocast runs at the widest dtype of their inputs
PROMOTE_ATEN: dict[str, frozenset[str]] = {
    "cuda": frozenset({
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
        "scatter_add", "tensordot", "cat", "stack",
    }),
    "cpu": frozenset({"cat", "stack", "index_copy"}),
}  # fmt: skip

#: ONNX op types whose every node autocast runs in the lower precision (their aten ops are all above)
LOWER_PRECISION_OP_TYPES = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "PRelu", "Einsum"})
#: ONNX op types (and dlbench's loss op types) autocast runs in float32, per device
FLOAT32_OP_TYPES: dict[str, frozenset[str]] = {
    "cuda": frozenset({
        "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "Exp", "Log", "Pow", "Reciprocal",
        "ReduceSum", "ReduceLogSumExp", "ReduceProd", "CumSum", "Softplus", "SoftmaxCrossEntropyLoss",
        "NegativeLogLikelihoodLoss", "NLLLoss", "MSELoss", "BCEWithLogitsLoss",
    }),
    "cpu": frozenset({"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "NLLLoss", "MSELoss",
                      "BCEWithLogitsLoss"}),
}  # fmt: skip


def _device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def lower_precision_dtype(amp: str) -> str | None:
    """The dtype ``amp`` lowers autocast's ops to (None for ``none``); an unknown value names the choices."""
    if amp not in AMP_DTYPES:
        raise ValueError(f"amp={amp!r}: use one of {', '.join(AMP_MODES)}")
    return AMP_DTYPES[amp]


def runs_in_lower_precision(name: str, device: str = "cpu") -> bool:
    """Whether autocast on ``device`` runs ``name`` (an ONNX op type or an aten name, with or without
    ``aten::``) in the lower precision."""
    name = name.removeprefix("aten::")
    return name in LOWER_PRECISION_OP_TYPES or name in LOWER_PRECISION_ATEN[_device_kind(device)]


def runs_in_float32(name: str, device: str = "cpu") -> bool:
    """Whether autocast on ``device`` runs ``name`` (ONNX op type or aten name) in float32."""
    name = name.removeprefix("aten::")
    kind = _device_kind(device)
    return name in FLOAT32_OP_TYPES[kind] or name in FLOAT32_ATEN[kind]


def autocast_dtype(name: str, amp: str, device: str = "cpu") -> str | None:
    """The dtype autocast gives ``name`` under ``amp``: the lower precision, float32, or None where it runs in
    its inputs' dtype (or where ``amp`` is ``none``)."""
    lower = lower_precision_dtype(amp)
    if lower is None:
        return None
    if runs_in_lower_precision(name, device):
        return lower
    return "float32" if runs_in_float32(name, device) else None
