"""onnxruntime as it runs a model: the optimized graph of the session, and each of its nodes as a one-node
model that computes, on the tensors the session passes it (in their layout), what the session computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from dlbench.backends.onnxruntime.optimized import optimized_graph, session_nodes, tensor_values
from dlbench.backends.whole_model.run import model_feeds
from dlbench.onnx.rebatch import rebatched_model

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def conv_bn_relu(path: Path) -> onnx.ModelProto:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                           nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()).eval()  # fmt: skip
    torch.onnx.export(module, (torch.randn(1, 8, 12, 12),), str(path), input_names=["x"], dynamo=False,
                      opset_version=17, do_constant_folding=False)  # fmt: skip
    return onnx.load(str(path))


def test_the_session_folds_batchnorm_and_fuses_the_activation_into_its_conv(tmp_path: Path) -> None:
    optimized = optimized_graph(conv_bn_relu(tmp_path / "cbr.onnx"), threads=1)
    kinds = [(node.domain, node.op_type) for node in optimized.graph.node]
    assert not any(op in ("BatchNormalization", "Relu") for _, op in kinds)  # folded into the convolutions
    convs = [node for node in optimized.graph.node if node.op_type in ("Conv", "FusedConv")]
    assert len(convs) == 2 and all(node.domain.startswith("com.microsoft") for node in convs)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_each_session_node_alone_computes_what_the_session_computes(name: str) -> None:
    optimized = optimized_graph(rebatched_model(ZOO / f"light_{name}.onnx", 1), threads=1)
    values = tensor_values(optimized, model_feeds(optimized))
    nodes = session_nodes(optimized, values)
    assert sum(node.count for node in nodes) == len(optimized.graph.node)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for node in nodes:
        session = ort.InferenceSession(node.model, options, providers=["CPUExecutionProvider"])
        outputs = session.run(None, node.feeds)
        for output, array in zip(session.get_outputs(), outputs, strict=True):
            np.testing.assert_allclose(array, values[output.name], rtol=1e-5, atol=1e-5)
