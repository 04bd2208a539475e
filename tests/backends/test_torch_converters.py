"""The converters the torch engine adds to onnx2torch: every node type of GPT-2, BERT, ViT, an
nn.TransformerEncoder at torch's default opset and the model zoo's CNNs becomes part of a real module, and
the module computes what onnxruntime computes on the same model."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from dlbench.backends.torch.graph import UnsupportedModel, torch_module
from dlbench.backends.whole_model.run import agreement, model_feeds, onnxruntime_engine, torch_engine
from dlbench.onnx.rebatch import rebatched_model

sys.path.insert(0, str(Path(__file__).parents[1] / "onnx"))


def both_engines(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    feeds = model_feeds(model) if feeds is None else feeds
    return onnxruntime_engine(model, feeds, 1)[1], torch_engine(model, feeds, 1)[1]


def one_node(node: onnx.NodeProto, shape: list[int], initializers=(), opset: int = 18) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_small_transformers_from_transformers_run_on_the_torch_engine_as_onnxruntime_does(
    tmp_path: Path, name: str
) -> None:
    pytest.importorskip("transformers")
    from hf_models import export_transformer

    path = export_transformer(name, tmp_path / f"{name}.onnx")
    model = rebatched_model(path, 1, {} if name == "vit" else {"seq": 16})
    ort_facts, torch_facts = both_engines(model)
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-5
    ran = torch_facts["torch_nodes_per_call"]
    # the comparisons of opset 16 that onnx2torch has no converter for (GPT-2's causal mask, BERT's)
    assert {"gpt2": "LessOrEqual", "bert": "GreaterOrEqual", "vit": "Erf"}[name] in ran


def test_a_transformer_encoder_at_torchs_default_opset_with_its_weights_beside_it_runs_on_the_torch_engine(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()
    x = torch.randn(1, 8, 32)
    path = tmp_path / "encoder.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(encoder, (x,), str(path), input_names=["x"], dynamo=False)  # the default opset (20)
    model = onnx.load(str(path))
    assert model.opset_import[0].version >= 19  # Reshape-19: onnx2torch knows Reshape up to 14
    # saved with its weights beside it (as the default exporter does): the fixed model must carry them
    onnx.save(model, str(path), save_as_external_data=True, location="encoder.onnx.data", size_threshold=0)
    model = rebatched_model(path, 1)
    ort_facts, torch_facts = both_engines(model, {"x": x.numpy()})
    with torch.inference_mode():
        expected = encoder(x).numpy()
    assert agreement([expected], torch_facts["outputs"]) < 1e-5
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-5


@pytest.mark.slow  # the dynamo exporter takes 10-20 s
def test_a_transformer_encoder_exported_by_torchs_default_exporter_runs_with_its_weights_beside_it(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()
    x = torch.randn(1, 8, 32)
    path = tmp_path / "encoder.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(encoder, (x,), str(path), input_names=["x"], verbose=False)  # dynamo, since torch 2.9
    assert (tmp_path / "encoder.onnx.data").is_file()  # the weights: beside the model, not in it
    model = rebatched_model(path, 1)  # the fixed model is written elsewhere: it must carry its weights
    ort_facts, torch_facts = both_engines(model, {"x": x.numpy()})
    with torch.inference_mode():
        expected = encoder(x).numpy()
    assert agreement([expected], torch_facts["outputs"]) < 1e-5
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-5


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_an_average_pool_with_asymmetric_pads_averages_what_onnxruntime_averages(count_include_pad: int) -> None:
    # inception_v1's last pool: 7x7 windows, one row and column of padding at the end only
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1], pads=[0, 1, 2, 0],
                            count_include_pad=count_include_pad)  # fmt: skip
    model = one_node(pool, [2, 3, 7, 6])
    ort_facts, torch_facts = both_engines(model)
    assert torch_facts["outputs"][0].shape == ort_facts["outputs"][0].shape == (2, 3, 4, 6)
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-6


def test_reductions_of_opset_18_reshape_allowing_zero_and_flatten_on_its_axis_compute_what_onnxruntime_does() -> None:
    axes = onnx.numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "axes")
    for op_type in ("ReduceMean", "ReduceMax", "ReduceL2"):
        model = one_node(helper.make_node(op_type, ["x", "axes"], ["y"], keepdims=0), [2, 3, 4, 5], [axes])
        ort_facts, torch_facts = both_engines(model)
        assert torch_facts["outputs"][0].shape == (2, 4)
        assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-6, op_type
    # a Reshape with allowzero=1 (the default exporter's) to a shape without zeros is a plain reshape
    shape = onnx.numpy_helper.from_array(np.array([4, -1], dtype=np.int64), "shape")
    reshape = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    ort_facts, torch_facts = both_engines(one_node(reshape, [2, 3, 4], [shape]))
    assert torch_facts["outputs"][0].shape == (4, 6) and agreement(ort_facts["outputs"], torch_facts["outputs"]) == 0
    # a Flatten whose input shape is not known before the call keeps its axis (onnx2torch's flattens at 1)
    flatten = helper.make_node("Flatten", ["x"], ["y"], axis=0)
    ort_facts, torch_facts = both_engines(one_node(flatten, [2, 3, 4]))
    assert torch_facts["outputs"][0].shape == (1, 24) and agreement(ort_facts["outputs"], torch_facts["outputs"]) == 0


def test_a_newer_version_that_uses_what_it_added_is_refused_naming_the_addition() -> None:
    split = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
    graph = helper.make_graph([split], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"])  # fmt: skip
    with pytest.raises(UnsupportedModel, match="Split with num_outputs is not converted"):
        torch_module(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert"])  # gpt2 and vit pass too (3.5 and 2 min on the 2-core VM): left out of CI
def test_full_size_transformers_run_on_both_engines_and_every_operation_runs_alone(tmp_path: Path, name: str) -> None:
    # BERT-base (random weights) at batch 1, seq 128, as the full-size targets evaluate it: the torch engine
    # computes what onnxruntime does, and every operation builds the one-node model its benchmark times
    pytest.importorskip("transformers")
    from hf_models import export_transformer

    from dlbench.backends.onnxruntime.run import prepared
    from dlbench.onnx.extract import extract_operations
    from dlbench.operators.node_file import NodeEntry

    path = export_transformer(name, tmp_path / f"{name}.onnx", full_size=True)
    dims = {} if name == "vit" else {"seq": 128}
    ort_facts, torch_facts = both_engines(rebatched_model(path, 1, dims))
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-4
    for op in extract_operations(path, 1, dims=dims, training=False).operations():
        assert prepared(NodeEntry(op.op_type, op.params, op.node), "float32").feeds is not None, op
