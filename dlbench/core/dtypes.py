"""The one list of data types: what benchmarks and training run in, their short names, and ONNX's element types
with their sizes. Every module that checks, names or sizes a dtype imports it from here (no torch import: a
backend maps a name with ``getattr(torch, name)``)."""

from __future__ import annotations

#: what benchmarks, training scripts and roofline sweeps run in (``dtype=``, ``roofline.dtypes``)
DTYPES = ("float32", "float16", "bfloat16")
#: a dtype in run names
SHORT_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
#: the memory formats an operation runs in (the operations' ``memory_format`` column, ``channels_last=true``):
#: ``channels_last`` is NHWC strides of a 4-D tensor (``torch.channels_last``); tensors of other ranks stay dense
MEMORY_FORMATS = ("contiguous", "channels_last")

#: ONNX element types by name (numpy's spelling) and TensorProto number
ELEMENT_TYPES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "string": 8,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "bfloat16": 16,
}  # fmt: skip
ELEMENT_TYPE_NAMES = {number: name for name, number in ELEMENT_TYPES.items()}
#: bytes per element of every numeric element type (a string has no fixed size)
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "int32": 4, "int64": 8, "bool": 1,
    "float16": 2, "float64": 8, "uint32": 4, "uint64": 8, "bfloat16": 2,
}  # fmt: skip
#: the element types a float Cast may target and keep its gradient (``onnx/step.py``)
FLOAT_TYPES = ("float32", "float16", "float64", "bfloat16")


def numeric_element_type(number: int) -> str | None:
    """The name of ONNX element type ``number`` when it is numeric (has a size), else None."""
    name = ELEMENT_TYPE_NAMES.get(number)
    return name if name in DTYPE_BYTES else None
