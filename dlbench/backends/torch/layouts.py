"""A protocol row's own dtype and memory format (numbers after its parameters: ``core/settings.py``
``ROW_SETTINGS``), and why a row did not run: "unable: <dtype>" where torch has no kernel of the operator for
that dtype on this device. The tensors are laid out by :func:`dlbench.backends.torch.params.laid_out_as`."""

from __future__ import annotations

import torch

from dlbench.backends.torch.kernels import DTYPES
from dlbench.backends.torch.params import MEMORY_FORMATS, UnsupportedRow, laid_out_as
from dlbench.core.settings import ROW_SETTINGS, row_value

__all__ = ["MEMORY_FORMATS", "cannot_run", "laid_out_as", "row_parameters"]


def row_parameters(
    op_type: str, descriptors: list[str], values: list[float], dtype: torch.dtype, memory_format: str
) -> tuple[dict[str, float], torch.dtype, str]:
    """A row's parameters by descriptor, its dtype and memory format: its own where it carries them after the
    parameters, else the invocation's ``dtype`` and ``memory_format``."""
    extra = len(values) - len(descriptors)
    if extra not in (0, len(ROW_SETTINGS)):
        raise UnsupportedRow(
            f"{len(values)} parameters, {op_type} takes {len(descriptors)}: {', '.join(descriptors)} "
            f"(then optionally {', '.join(ROW_SETTINGS)})"
        )
    params = dict(zip(descriptors, values[: len(descriptors)], strict=True))
    if not extra:
        return params, dtype, memory_format
    try:
        codes = zip(ROW_SETTINGS, values[len(descriptors) :], strict=True)
        named = {key: row_value(key, code) for key, code in codes}
    except ValueError as err:
        raise UnsupportedRow(str(err)) from err
    return params, DTYPES[named["dtype"]], named["memory_format"]


def cannot_run(op_type: str, err: Exception, dtype: torch.dtype, memory_format: str) -> str:
    """Why a row did not run: "unable: <dtype>" where torch has no kernel of the operator for its dtype on
    this device (the sweep names such rows), else the operator and the error."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, RuntimeError) and "not implemented for" in text:
        return f"unable: {str(dtype).removeprefix('torch.')} ({op_type}: {text})"
    return f"{op_type} cannot run: {text}" + (f" (in {memory_format})" if memory_format != "contiguous" else "")
