"""The network of an instrumented script served as a PyTorch user serves it, when dlbench asks for it
(``DLBENCH_SERVE_SAMPLES``, by ``task=evaluate evaluate.mode=inference``): a deep copy of the real
``nn.Module`` in eval mode, called on the script's own batch under ``torch.inference_mode`` (``torch.compile``d
with ``DLBENCH_SERVE_COMPILE=1``), timed with the operator benchmarks' ``DLBENCH_*`` settings; and the same
eval-mode copy exported to ONNX beside the samples (``<samples>.onnx``) for the prediction's operator
benchmarks. It runs once, before the first batch's timer starts, and never fails the training: a failure is
written to ``<samples>.error``."""

from __future__ import annotations

import copy
import os
import traceback
from pathlib import Path
from typing import Any

from dlbench.training.export import OPSET, _inputs

ENV_SERVE = "DLBENCH_SERVE_SAMPLES"
ENV_COMPILE = "DLBENCH_SERVE_COMPILE"


def requested_path() -> Path | None:
    """Where dlbench wants the served network's samples, or None when it did not ask."""
    text = os.environ.get(ENV_SERVE, "").strip()
    return Path(text) if text else None


def served_model_path(samples: Path) -> Path:
    return samples.with_suffix(".onnx")


def serve_network(net: Any, batch: Any, samples: Path) -> bool:
    """Time the eval-mode copy of ``net`` on ``batch`` and export it; True when both worked."""
    import torch

    from dlbench.backends.timing import TimingSettings, time_repeated

    inputs = _inputs(batch)
    samples.parent.mkdir(parents=True, exist_ok=True)
    try:
        served = copy.deepcopy(net).eval()  # the trained network's mode and state stay as they are
        names = [f"input_{i}" if len(inputs) > 1 else "input" for i in range(len(inputs))]
        with torch.no_grad():
            torch.onnx.export(copy.deepcopy(served), inputs, str(served_model_path(samples)), input_names=names,
                              output_names=["output"], opset_version=OPSET, dynamo=False,
                              training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False)  # fmt: skip
        compiled = os.environ.get(ENV_COMPILE, "") == "1"
        module = torch.compile(served) if compiled else served

        def forward() -> None:
            with torch.inference_mode():
                module(*inputs)

        forward()  # a compiled module compiles here, outside the timing
        timing = time_repeated(forward, TimingSettings.from_env())
        engine = "torch_compile" if compiled else "torch"
        with samples.open("w", encoding="utf-8") as out:
            out.write("engine,ms\n")
            out.writelines(f"{engine},{value!r}\n" for value in timing.samples_ms)
    except Exception:  # noqa: BLE001 - the training goes on; dlbench reports the reason
        samples.with_name(samples.name + ".error").write_text(traceback.format_exc(), encoding="utf-8")
        return False
    return True
