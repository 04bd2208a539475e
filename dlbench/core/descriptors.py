"""Canonical operator parameter descriptors (the original tool's style); each operator's cost is in
:mod:`dlbench.core.costs` (re-exported here) and the tensors of the glue operators in :mod:`dlbench.core.glue`.

Every tensor of an elementwise-like operator is described as rank 4, ``N, C, H, W``, with leading 1s for
lower ranks (:mod:`dlbench.core.shapes`); a second and third tensor take the suffixes ``_b`` and ``_c``, an
output ``_out``. ``mode`` selects the pass: 0 forward, 1 backward (backward-data for Conv; for the glue
operators the gradients of every float input, Pow's base only), 2 backward-weights (Conv only) or forward
inference (BatchNormalization: running statistics; MaxPool and AveragePool: no max positions kept for a
backward pass), 3 + i the gradient of input i alone (Mul, Div, Sub, Pow, Where: training differentiates only
the inputs that need a gradient).
"""

from __future__ import annotations

from dlbench.core.collectives import COLLECTIVE, COLLECTIVE_OP_TYPES
from dlbench.core.costs import conv_output_hw, operation_cost

# has_bias: 1 where the node adds a per-channel bias (the ONNX Conv's third input; training's backward-weights
# then reduces the bias gradient too), 0 where not. ceil_mode: a pool's last, partial window kept (1) only where
# it adds one (the ONNX attribute set to 1 without changing the output is described as 0).
CONV = (
    "N C H W K kernel_shape_0 kernel_shape_1 pads_0 pads_1 pads_2 pads_3 "
    "strides_0 strides_1 dilations_0 dilations_1 group has_bias mode"
).split()
GEMM = "M K N transA transB batch".split()
BATCHNORM = "N C H W epsilon momentum mode".split()
ELEMENTWISE = "N C H W mode".split()  # Relu, GlobalAveragePool, the pointwise functions
POOL = "N C H W kernel_shape_0 kernel_shape_1 pads_0 pads_1 pads_2 pads_3 strides_0 strides_1 ceil_mode mode".split()
ADD = "N C H W N_b C_b H_b W_b".split()
SOFTMAX = "N C H W axis mode".split()
LAYERNORM = "N C H W axis epsilon mode".split()

# The glue of real networks. Gelu's approximate: 0 none (erf), 1 tanh. Cast's to: the ONNX element type.
GELU = "N C H W approximate mode".split()
CAST = "N C H W to mode".split()
BINARY = [*ADD, "mode"]  # A (N C H W) op B (_b), broadcasting as ONNX does
VARIADIC = [*ADD, "inputs", "mode"]  # the first input, then `inputs - 1` inputs of shape _b
WHERE = [*ADD, "N_c", "C_c", "H_c", "W_c", "mode"]  # condition, X (_b), Y (_c)
CONCAT = "N C H W axis inputs mode".split()  # N C H W: the output; the inputs cut `axis` evenly
SPLIT = "N C H W axis outputs mode".split()  # N C H W: the input, cut evenly along `axis`
SLICE = "N C H W N_out C_out H_out W_out mode".split()  # the output starts at 0 with step 1 on every axis
EXPAND = SLICE  # input and target shape
TILE = "N C H W repeats_0 repeats_1 repeats_2 repeats_3 mode".split()
TRANSPOSE = "N C H W perm_0 perm_1 perm_2 perm_3 mode".split()
GATHER = "N C H W axis indices mode".split()  # data N C H W, `indices` indices along `axis`
GATHER_ELEMENTS = [*ADD, "axis", "mode"]  # data N C H W, indices (and output) _b
REDUCE = "N C H W reduce_N reduce_C reduce_H reduce_W mode".split()  # 1: the dimension is reduced (kept as 1)
LRN = "N C H W size alpha beta bias mode".split()

# The training step's optimizer, as torch.optim ran it: ``tensors`` parameters of N C H W each, or, when
# ``numel`` is not ``tensors`` x N C H W (one foreach call over tensors of many shapes), ``numel`` elements
# split evenly over ``tensors`` 1-D tensors; options as numbers (booleans 0/1; the learning rate changes no work)
OPTIMIZER_GEOMETRY = "N C H W tensors numel".split()
OPTIMIZERS: dict[str, list[str]] = {
    "SGD": [*OPTIMIZER_GEOMETRY, *"momentum dampening nesterov weight_decay maximize foreach fused".split()],
    "Adam": [*OPTIMIZER_GEOMETRY, *"beta1 beta2 eps weight_decay amsgrad maximize foreach fused".split()],
    "AdamW": [*OPTIMIZER_GEOMETRY, *"beta1 beta2 eps weight_decay amsgrad maximize foreach fused".split()],
    "RMSprop": [*OPTIMIZER_GEOMETRY, *"alpha eps weight_decay momentum centered maximize foreach".split()],
    # optimizer.zero_grad(set_to_none=False), and torch.nn.utils.clip_grad_norm_, over the same tensors
    "ZeroGrad": [*OPTIMIZER_GEOMETRY, "foreach"],
    "ClipGradNorm": [*OPTIMIZER_GEOMETRY, "max_norm", "norm_type", "foreach"],
}
#: The training step's losses besides SoftmaxCrossEntropyLoss: input N C H W (NLLLoss: N rows of C classes)
LOSSES: dict[str, list[str]] = {
    "MSELoss": ELEMENTWISE,
    "BCEWithLogitsLoss": ELEMENTWISE,
    "NLLLoss": "N C mode".split(),
}

#: GradScaler's operators: the unscale of ``tensors`` gradients of ``elements`` elements in all (their dtype the
#: row's) with its inf/NaN check, and the update of ``N`` one-element scales (1: GradScaler keeps one)
AMP: dict[str, list[str]] = {"AmpUnscale": ["tensors", "elements"], "AmpUpdateScale": ["N"]}

#: op_type -> canonical descriptors, the ``param_descr`` of the shipped registry entries.
DESCRIPTORS: dict[str, list[str]] = {
    "Conv": CONV,
    "Gemm": GEMM,
    "MatMul": GEMM,
    "BatchNormalization": BATCHNORM,
    "Relu": ELEMENTWISE,
    "GlobalAveragePool": ELEMENTWISE,
    "MaxPool": POOL,
    "AveragePool": POOL,
    "Add": ADD,
    "Softmax": SOFTMAX,
    "LayerNormalization": LAYERNORM,
    **OPTIMIZERS,  # the optimizer update of ``tensors`` parameter tensors
    "SoftmaxCrossEntropyLoss": "N C mode".split(),  # N rows of C classes (the training step's loss)
    **LOSSES,
    # a batch of ``ops`` operators too small to compute: the framework's own cost per operator
    "FrameworkOverhead": "ops mode".split(),
    **AMP,
    **{op: ELEMENTWISE for op in ("Sqrt", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Clip")},
    "Gelu": GELU,
    "Cast": CAST,
    **{op: BINARY for op in ("Mul", "Div", "Sub", "Pow")},
    **{op: VARIADIC for op in ("Sum", "Max", "Min")},
    "Where": WHERE,
    "Concat": CONCAT,
    "Split": SPLIT,
    "Slice": SLICE,
    "Expand": EXPAND,
    "Tile": TILE,
    "Transpose": TRANSPOSE,
    "Gather": GATHER,
    "ReduceMean": REDUCE,
    "ReduceSum": REDUCE,
    "LRN": LRN,
    "GatherElements": GATHER_ELEMENTS,
    # boolean results, forward only: comparisons and logic broadcast like BINARY, predicates are pointwise
    **{op: BINARY for op in ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor")},
    **{op: ELEMENTWISE for op in ("Not", "IsNaN", "IsInf")},
    # torch.distributed collectives: a message of ``bytes`` among ``world_size`` ranks (core/collectives.py)
    **{op: COLLECTIVE for op in COLLECTIVE_OP_TYPES},
}

__all__ = ["DESCRIPTORS", "conv_output_hw", "operation_cost"]
