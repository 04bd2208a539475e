"""The tensors of the glue operators of real networks (pointwise functions, broadcasting arithmetic, data
movement, reductions) from their canonical parameters. One definition for the costs, the torch kernels
and their memory guard, so all three agree on what an operation reads and writes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlbench.core.dtypes import DTYPE_BYTES, FLOAT_TYPES, numeric_element_type
from dlbench.core.values import Number

Shape = tuple[int, ...]

UNARY = ("Sqrt", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Clip")
BINARY = ("Mul", "Div", "Sub", "Pow")
VARIADIC = ("Sum", "Max", "Min")
MOVEMENT = ("Concat", "Split", "Slice", "Transpose", "Gather", "Expand", "Tile")
REDUCTIONS = ("ReduceMean", "ReduceSum")
COMPARISONS = ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")
LOGICAL = ("And", "Or", "Xor")
PREDICATES = ("Not", "IsNaN", "IsInf")
#: Operators whose outputs are booleans: they have no gradient (``mode`` 0 only).
NON_DIFFERENTIABLE = (*COMPARISONS, *LOGICAL, *PREDICATES)
#: Operators whose outputs carry no gradient whatever their inputs: shapes, sizes, indices and booleans. The one
#: list: the training step's pruning (``onnx/step.py``), the unfolding (``onnx/unfold.py``) and the kernels read it.
NO_GRADIENT = frozenset(
    {"Shape", "Size", "ConstantOfShape", "Range", "NonZero", "ArgMax", "ArgMin", "EyeLike", *NON_DIFFERENTIABLE}
)
GLUE_OP_TYPES = (
    *UNARY, "Gelu", "Cast", *BINARY, *VARIADIC, "Where", *MOVEMENT, "GatherElements", *REDUCTIONS, "LRN",
    *NON_DIFFERENTIABLE,
)  # fmt: skip


def carries_gradient(op_type: str, cast_to: int | None = None) -> bool:
    """Whether an operator's output carries a gradient back to its inputs: not for :data:`NO_GRADIENT`, and a
    ``Cast`` only to a float type (``cast_to``: its ``to``; autograd casts the gradient back, an integer or
    boolean result has none)."""
    if op_type == "Cast":
        return cast_to is not None and numeric_element_type(int(cast_to)) in FLOAT_TYPES
    return op_type not in NO_GRADIENT


INDEX_BYTES = 8  # int64 indices
#: ``mode`` 3 + i: the gradient of input i alone (the binary operators and Where: training differentiates only
#: the inputs that need a gradient, so ``x / constant`` computes one)
INPUT_GRADIENT_MODE = 3


class InvalidParameters(ValueError):
    """Canonical parameters that describe no valid operation (the message says which and why)."""


@dataclass(frozen=True)
class GlueTensors:
    """What one forward pass reads and writes. ``kinds`` says per input whether it is a ``float`` tensor
    (of the run's dtype, differentiable), a ``bool`` condition or an ``index`` tensor (int64)."""

    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    kinds: tuple[str, ...]
    output_kind: str = "float"  # or "bool"

    @property
    def float_inputs(self) -> tuple[Shape, ...]:
        return tuple(s for s, k in zip(self.inputs, self.kinds, strict=True) if k == "float")


def integer(p: Mapping[str, Number], key: str, default: int | None = None, minimum: int | None = None) -> int:
    if key not in p:
        if default is None:
            raise InvalidParameters(f"missing parameter {key}")
        value: Number = default
    else:
        value = p[key]
    if not float(value).is_integer():
        raise InvalidParameters(f"{key}={value} is not an integer")
    if minimum is not None and int(value) < minimum:
        raise InvalidParameters(f"{key}={value} must be >= {minimum}")
    return int(value)


def shape_of(p: Mapping[str, Number], suffix: str = "") -> Shape:
    return tuple(integer(p, f"{d}{suffix}", 1, minimum=1) for d in "NCHW")


def elements(shape: Sequence[int]) -> int:
    return math.prod(shape)


def broadcast(*shapes: Shape) -> Shape:
    out = []
    for dims in zip(*shapes, strict=True):
        size = max(dims)
        if any(d not in (1, size) for d in dims):
            raise InvalidParameters(f"shapes {', '.join(map(str, map(list, shapes)))} do not broadcast")
        out.append(size)
    return tuple(out)


def axis_of(p: Mapping[str, Number], key: str = "axis") -> int:
    axis = integer(p, key, 0)
    if not -4 <= axis < 4:
        raise InvalidParameters(f"{key}={axis} is outside a rank-4 tensor")
    return axis % 4


def even_parts(total: int, parts: int, what: str) -> list[int]:
    """``total`` cut into ``parts`` sizes that differ by at most one (larger ones first, as ONNX's Split
    without ``split`` sizes does for an uneven cut)."""
    if parts > total:
        raise InvalidParameters(f"{what}: {parts} parts of a dimension of size {total}")
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def replaced(shape: Shape, axis: int, size: int) -> Shape:
    return (*shape[:axis], size, *shape[axis + 1 :])


def glue_tensors(op_type: str, p: Mapping[str, Number]) -> GlueTensors:
    """The tensors of a forward pass of ``op_type`` with canonical parameters ``p``; raises
    :class:`InvalidParameters` for parameters that describe no valid operation."""
    x = shape_of(p)
    if op_type in PREDICATES:
        return GlueTensors((x,), (x,), ("bool" if op_type == "Not" else "float",), "bool")
    if op_type in (*COMPARISONS, *LOGICAL):
        b = shape_of(p, "_b")
        kind = "bool" if op_type in LOGICAL else "float"
        return GlueTensors((x, b), (broadcast(x, b),), (kind, kind), "bool")
    if op_type == "GatherElements":
        axis, b = axis_of(p), shape_of(p, "_b")
        if any(i > d for n, (i, d) in enumerate(zip(b, x, strict=True)) if n != axis):
            raise InvalidParameters(f"GatherElements: indices {list(b)} exceed the data {list(x)} off axis {axis}")
        return GlueTensors((x, b), (b,), ("float", "index"))
    if op_type in (*UNARY, "Gelu", "Cast", "LRN"):
        if op_type == "Cast" and numeric_element_type(integer(p, "to", 1)) is None:
            raise InvalidParameters(f"to={p.get('to')}: not a numeric ONNX element type")
        if op_type == "LRN":
            integer(p, "size", 5, minimum=1)
        return GlueTensors((x,), (x,), ("float",))
    if op_type in BINARY:
        b = shape_of(p, "_b")
        return GlueTensors((x, b), (broadcast(x, b),), ("float", "float"))
    if op_type in VARIADIC:
        count = integer(p, "inputs", 2, minimum=1)
        b = shape_of(p, "_b") if count > 1 else x
        return GlueTensors((x, *[b] * (count - 1)), (broadcast(x, b),), ("float",) * count)
    if op_type == "Where":
        b, c = shape_of(p, "_b"), shape_of(p, "_c")
        return GlueTensors((x, b, c), (broadcast(x, b, c),), ("bool", "float", "float"))
    if op_type == "Concat":
        axis, count = axis_of(p), integer(p, "inputs", 2, minimum=1)
        parts = even_parts(x[axis], count, "Concat")
        return GlueTensors(tuple(replaced(x, axis, s) for s in parts), (x,), ("float",) * count)
    if op_type == "Split":
        axis, count = axis_of(p), integer(p, "outputs", 2, minimum=1)
        parts = even_parts(x[axis], count, "Split")
        return GlueTensors((x,), tuple(replaced(x, axis, s) for s in parts), ("float",))
    if op_type in ("Slice", "Expand"):
        out = shape_of(p, "_out")
        if op_type == "Slice":
            if any(o > i for o, i in zip(out, x, strict=True)):
                raise InvalidParameters(f"Slice: output {list(out)} is larger than the input {list(x)}")
            return GlueTensors((x,), (out,), ("float",))
        return GlueTensors((x,), (broadcast(x, out),), ("float",))
    if op_type == "Tile":
        repeats = tuple(integer(p, f"repeats_{i}", 1, minimum=1) for i in range(4))
        return GlueTensors((x,), (tuple(d * r for d, r in zip(x, repeats, strict=True)),), ("float",))
    if op_type == "Transpose":
        perm = tuple(integer(p, f"perm_{i}", i) for i in range(4))
        if sorted(perm) != [0, 1, 2, 3]:
            raise InvalidParameters(f"perm {list(perm)} is not a permutation of 0..3")
        return GlueTensors((x,), (tuple(x[i] for i in perm),), ("float",))
    if op_type == "Gather":
        axis, count = axis_of(p), integer(p, "indices", 1, minimum=1)
        return GlueTensors((x, (count,)), (replaced(x, axis, count),), ("float", "index"))
    if op_type in REDUCTIONS:
        flags = [integer(p, f"reduce_{d}", 0) for d in "NCHW"]
        if any(f not in (0, 1) for f in flags):
            raise InvalidParameters(f"reduce_N..reduce_W={flags}: each is 0 or 1")
        return GlueTensors((x,), (tuple(1 if f else d for d, f in zip(x, flags, strict=True)),), ("float",))
    raise InvalidParameters(f"{op_type} is not a glue operator")


def flops_per_element(op_type: str, p: Mapping[str, Number]) -> int:
    """FLOPs per output element of a forward pass: a pointwise function or arithmetic operation counts as
    one whatever it computes (transcendental functions are not weighed); LRN sums ``size`` squares, then
    scales, raises and divides."""
    if op_type == "LRN":
        return 2 * integer(p, "size", 5) + 3
    if op_type in VARIADIC:
        return integer(p, "inputs", 2) - 1
    if op_type in (*UNARY, "Gelu", *BINARY, "Where", *NON_DIFFERENTIABLE):
        return 1
    return 0


#: ``mode`` 2 of Mul: the product written into a view of a preallocated flat buffer (``mul(out=)``), as
#: DistributedDataParallel copies each gradient, divided by the world size, into its bucket
BUCKET_VIEW_MODE = 2


def glue_cost(op_type: str, p: Mapping[str, Number], dtype_bytes: int) -> tuple[float, float]:
    """FLOPs and compulsory bytes of one pass (``mode`` 0 forward, 1 backward: the gradients of every float
    input, Pow's base only; 3 + i: input i's gradient alone, binary operators and Where) of a glue operator."""
    t = glue_tensors(op_type, p)
    mode = integer(p, "mode", 0)
    ins = [elements(s) for s in t.inputs]
    out = sum(elements(s) for s in t.outputs)
    width = [dtype_bytes if k == "float" else (1 if k == "bool" else INDEX_BYTES) for k in t.kinds]
    read = sum(n * w for n, w in zip(ins, width, strict=True))
    float_in = sum(n for n, k in zip(ins, t.kinds, strict=True) if k == "float")
    if op_type == "Cast":
        to_bytes = DTYPE_BYTES[str(numeric_element_type(integer(p, "to", 1)))]
        return 0.0, float(out * (dtype_bytes + to_bytes))
    if op_type in NON_DIFFERENTIABLE and mode != 0:
        return 0.0, 0.0  # no gradient
    if op_type in REDUCTIONS:
        flops = ins[0] if mode == 0 else ins[0] * (op_type == "ReduceMean")
        return float(flops), float(dtype_bytes * (ins[0] + out))
    per = flops_per_element(op_type, p)
    if mode == 0 and op_type in ("Gather", "GatherElements"):  # only the gathered values are read
        return 0.0, float(2 * dtype_bytes * out + INDEX_BYTES * ins[1])
    if mode == 0 or (mode == BUCKET_VIEW_MODE and op_type == "Mul"):  # a forward; Mul into a view of a bucket
        return float(per * out), float(read + (1 if t.output_kind == "bool" else dtype_bytes) * out)
    if op_type in (
        "Gather",
        "GatherElements",
    ):  # the gradient scatters the rows back into a zeroed table: write it, add the rows
        data = ins[0]
        return float(out), float(dtype_bytes * (out + data) + INDEX_BYTES * ins[1])
    if op_type in ("Expand", "Tile"):  # the gradient sums the copies back: a reduction of the output
        return float(out - ins[0]), float(dtype_bytes * (out + ins[0]))
    if op_type in MOVEMENT:  # the gradient moves the data back
        return 0.0, float(dtype_bytes * (out + float_in))
    if mode >= INPUT_GRADIENT_MODE:  # one input's gradient: read the incoming gradient and the others, write it
        i = mode - INPUT_GRADIENT_MODE
        if i >= len(ins) or t.kinds[i] != "float" or op_type not in (*BINARY, "Where"):
            raise InvalidParameters(f"mode={mode}: {op_type} has no input {i} to differentiate alone")
        others = read - width[i] * ins[i]
        return float(per * out), float(dtype_bytes * (out + ins[i]) + others)
    # pointwise and broadcasting arithmetic: read the incoming gradient and the saved tensors, write the
    # input gradients (a broadcast input's gradient is summed from the output-sized one)
    grads = float_in if op_type != "Pow" else ins[0]
    flops = (2 if op_type in (*BINARY, *VARIADIC, "Where", "LRN") else 1) * per * out
    return float(flops), float(dtype_bytes * (out + float_in + grads) + (read - dtype_bytes * float_in))
