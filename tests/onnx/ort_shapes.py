"""The shapes onnxruntime actually produces for every tensor of a model, to hold extracted shapes to."""

from __future__ import annotations

from typing import Any

import numpy as np

_NUMPY = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def _feed(model: Any, seed: int) -> dict[str, np.ndarray]:
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feed = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        ttype = value.type.tensor_type
        shape = [d.dim_value for d in ttype.shape.dim]
        dtype = _NUMPY[ttype.elem_type]
        if np.issubdtype(dtype, np.integer):
            # token ids and masks: small non-negative integers (ones for a mask)
            feed[value.name] = np.ones(shape, dtype) if "mask" in value.name else rng.integers(0, 50, shape, dtype)
        else:
            feed[value.name] = rng.standard_normal(shape).astype(dtype)
    return feed


def actual_shapes(model: Any, seed: int = 0) -> dict[str, tuple[int, ...]]:
    """Every node output's shape when onnxruntime runs ``model`` (all input dimensions fixed) on random data."""
    import onnxruntime as ort

    from dlbench.backends.onnxruntime.optimized import every_output_exposed

    probe = every_output_exposed(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, _feed(probe, seed))
    return {name: tuple(int(d) for d in np.shape(v)) for name, v in zip(names, values, strict=True)}


def mismatches(extraction: Any, model: Any, actual: dict[str, tuple[int, ...]]) -> list[str]:
    """Extracted nodes whose output shapes differ from what onnxruntime produced."""
    outputs = {n.name or f"{n.op_type}_{i}": list(n.output) for i, n in enumerate(model.graph.node)}
    wrong = []
    for record in extraction.nodes:
        for tensor, shape in zip(outputs[record.name], record.output_shapes, strict=False):
            if tensor in actual and shape is not None and tuple(shape) != actual[tensor]:
                wrong.append(f"{record.name} {tensor}: extracted {shape}, onnxruntime {actual[tensor]}")
    return wrong
