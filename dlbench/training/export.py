"""The network of an instrumented script exported to ONNX when dlbench asks for it (``DLBENCH_EXPORT_ONNX``),
from the network and the batch the script hands to the context manager, so the script needs no export code.

The export runs on a deep copy of the network, outside the timed part of the batch, and never fails the
training: a failure is written beside the requested path (``<path>.error``) for dlbench to report.
"""

from __future__ import annotations

import copy
import os
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENV_EXPORT = "DLBENCH_EXPORT_ONNX"
OPSET = 17


def requested_path() -> Path | None:
    """Where dlbench wants the network, or None when it did not ask."""
    text = os.environ.get(ENV_EXPORT, "").strip()
    return Path(text) if text else None


def error_path(path: Path) -> Path:
    return path.with_name(path.name + ".error")


def _inputs(batch: Any) -> tuple[Any, ...]:
    """The network's positional inputs: a tensor, or a tuple/list of them."""
    if isinstance(batch, Sequence) and not hasattr(batch, "shape"):
        return tuple(batch)
    return (batch,)


def export_network(net: Any, batch: Any, path: Path) -> bool:
    """Export ``net`` called on ``batch`` to ``path`` with a dynamic batch dimension; True when it worked.

    Training mode is preserved (BatchNormalization stays a node with batch statistics, Dropout stays), and
    constants are not folded, so the graph shows the operators the training runs."""
    import torch

    inputs = _inputs(batch)
    names = [f"input_{i}" if len(inputs) > 1 else "input" for i in range(len(inputs))]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        clone = copy.deepcopy(net)  # tracing runs a forward pass: the trained network's state stays as it is
        with torch.no_grad():
            torch.onnx.export(
                clone,
                inputs,
                str(path),
                input_names=names,
                output_names=["output"],
                dynamic_axes={**{name: {0: "batch"} for name in names}, "output": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
                training=torch.onnx.TrainingMode.PRESERVE,
                do_constant_folding=False,
            )
    except Exception:  # noqa: BLE001 - the training goes on; dlbench reports the reason
        error_path(path).write_text(traceback.format_exc(), encoding="utf-8")
        return False
    return True
