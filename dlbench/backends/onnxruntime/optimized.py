"""onnxruntime as it runs a model: the executable ``python -m dlbench.backends.onnxruntime.optimized MODEL.onnx
NODES.csv`` asks onnxruntime for the optimized graph of the session it would measure (the same provider,
threads and optimization level: ``SessionOptions.optimized_model_filepath``), so the nodes are those the
session executes (Conv+BatchNorm folded, ``FusedConv``, the NCHWc ``Conv`` of domain com.microsoft.nchwc with
``ReorderInput``/``ReorderOutput`` at its edges, the transformer fusions). Each distinct node is timed in a
one-node session of its own, fed tensors of the shapes and types the whole session passes it (in its
layout: an NCHWc node gets blocked tensors), with the model's own weights, and no further optimization.
Writes one row per distinct node (count, median, the CI) to NODES.csv."""

from __future__ import annotations

import csv
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.backends.onnxruntime.run import session_options
from dlbench.backends.timing import TimingSettings, time_repeated
from dlbench.core.settings import from_environment


@dataclass(frozen=True)
class SessionNode:
    """One distinct node of the optimized graph: how often the session runs it, and its one-node model."""

    name: str
    domain: str
    op_type: str
    count: int
    shapes: str
    model: bytes
    feeds: dict[str, np.ndarray]


def optimized_graph(model: Any, threads: int) -> Any:
    """The graph onnxruntime's session of ``model`` runs (CPU provider, ``threads``, default level), with the
    graph inputs no node reads any more (an old model's folded weights) dropped."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="dlbench_ort_") as folder:
        options = session_options(ort, threads)
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(options.optimized_model_filepath)
    read = {name for node in optimized.graph.node for name in node.input}
    kept = [value for value in optimized.graph.input if value.name in read]
    del optimized.graph.input[:]
    optimized.graph.input.extend(kept)
    return optimized


def every_output_exposed(model: Any) -> Any:
    """A copy of ``model`` whose graph outputs include every node's outputs (a session then returns them all)."""
    import onnx

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    outputs = {value.name for value in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name and name not in outputs:
                exposed.graph.output.append(onnx.ValueInfoProto(name=name))
                outputs.add(name)
    return exposed


def tensor_values(optimized: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor the optimized graph computes on ``feeds``, by name, in the layout the session keeps it
    (run once with every node output exposed, nothing optimized again)."""
    import onnxruntime as ort

    exposed = every_output_exposed(optimized)
    options = session_options(ort, 1)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return {**feeds, **dict(zip(names, session.run(None, feeds), strict=True))}


def _one_node_model(optimized: Any, node: Any, values: dict[str, np.ndarray], weights: dict[str, Any]) -> tuple:
    from onnx import helper

    inputs, initializers, feeds = [], [], {}
    for name in node.input:
        if not name or name in weights:
            if name:
                initializers.append(weights[name])
            continue
        array = values[name]
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
        feeds[name] = np.ascontiguousarray(array)
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
    graph = helper.make_graph([node], "node", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(optimized.opset_import))
    model.ir_version = optimized.ir_version
    return model.SerializeToString(), feeds


def session_nodes(optimized: Any, values: dict[str, np.ndarray]) -> list[SessionNode]:
    """The distinct nodes of the optimized graph (same op, attributes, input shapes and types, same inputs
    being weights), each with its count and one-node model."""
    weights = {tensor.name: tensor for tensor in optimized.graph.initializer}
    found: dict[tuple, SessionNode] = {}
    for node in optimized.graph.node:
        described = [(n in weights, tuple(values[n].shape) if n in values else tuple(weights[n].dims) if n in weights
                      else (), str(values[n].dtype) if n in values else "") for n in node.input]  # fmt: skip
        key = (node.domain, node.op_type, tuple(a.SerializeToString() for a in node.attribute), tuple(described))
        if key in found:
            previous = found[key]
            found[key] = SessionNode(previous.name, previous.domain, previous.op_type, previous.count + 1,
                                     previous.shapes, previous.model, previous.feeds)  # fmt: skip
            continue
        model, feeds = _one_node_model(optimized, node, values, weights)
        shapes = " ".join("x".join(map(str, shape)) or "-" for _, shape, _ in described)
        found[key] = SessionNode(node.name or node.output[0], node.domain, node.op_type, 1, shapes, model, feeds)
    return list(found.values())


def time_node(node: SessionNode, threads: int, settings: TimingSettings) -> tuple[float, float | None, int]:
    """Median ms, its relative 95% CI and the samples of one run of the node's one-node session."""
    import onnxruntime as ort

    options = session_options(ort, threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(node.model, options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for name, array in node.feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cpu", 0))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")
    stats = time_repeated(lambda: session.run_with_iobinding(binding), settings).stats
    return stats.median_ms, stats.rel_ci, stats.reps or 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.backends.onnxruntime.optimized MODEL.onnx NODES.csv", file=sys.stderr)
        return 2
    import onnx

    from dlbench.backends.whole_model.run import model_feeds

    threads = int(from_environment(("threads",))["threads"])
    settings = TimingSettings.from_env()
    model = onnx.load(args[0])
    optimized = optimized_graph(model, threads)
    nodes = session_nodes(optimized, tensor_values(optimized, model_feeds(optimized)))
    with Path(args[1]).open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["node", "domain", "op_type", "count", "input_shapes", "median_ms", "rel_ci", "samples",
                         "error"])  # fmt: skip
        for node in nodes:
            try:
                median, rel_ci, samples = time_node(node, threads, settings)
            except Exception as err:  # noqa: BLE001 - a node that cannot run alone fails its row, the rest go on
                text = " ".join((str(err).strip() or type(err).__name__).splitlines()[:2])[:300]
                writer.writerow([node.name, node.domain, node.op_type, node.count, node.shapes, "", "", 0, text])
                continue
            writer.writerow([node.name, node.domain, node.op_type, node.count, node.shapes, repr(median),
                             "" if rel_ci is None else repr(rel_ci), samples, ""])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
