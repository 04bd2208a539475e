"""Symbolic dimensions: the batch from batch_size, every other named dimension from dims.<name>; an open or
misspelt dimension stops extraction with a message saying what to set. Checked on a hand-written encoder and
on Hugging Face transformers built from configs and exported with dynamic batch and sequence axes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx_models import EncoderLayer
from ort_shapes import actual_shapes, mismatches

from dlbench.onnx.errors import ExtractionError
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.rebatch import rebatched_model


@pytest.fixture(scope="module")
def encoder_seq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seq") / "seq.onnx"
    torch.manual_seed(0)
    torch.onnx.export(
        EncoderLayer().eval(), (torch.randn(2, 16, 64),), str(path), input_names=["x"],
        dynamic_axes={"x": {0: "batch", 1: "seq"}}, dynamo=False,
    )  # fmt: skip
    return path


def test_an_open_dimension_stops_extraction_naming_it_its_inputs_and_the_override(encoder_seq: Path):
    with pytest.raises(ExtractionError) as caught:
        extract_operations(encoder_seq, 4)
    message = str(caught.value)
    assert "seq.onnx" in message and "'seq': used by 'x' axis 1; set dims.seq=N" in message


def test_dims_set_the_sequence_and_batch_size_the_batch(encoder_seq: Path):
    extraction = extract_operations(encoder_seq, 4, dims={"seq": 10})
    assert extraction.skipped == () and dict(extraction.dims) == {"batch": 4, "seq": 10}
    problems = sorted(tuple(dict(n.params)[k] for k in ("M", "K", "N", "batch")) for n in extraction.compute_nodes
                      if n.op_type == "MatMul")  # fmt: skip
    assert problems == sorted(
        [(40, 64, 192, 1), (10, 16, 10, 16), (10, 10, 16, 16), (40, 64, 64, 1), (40, 64, 256, 1), (40, 256, 64, 1)]
    )


def test_a_misspelt_dimension_is_an_error_listing_the_models_dimensions(encoder_seq: Path):
    expected = r"dims\.sqe: the model has no dimension 'sqe'; its named dimensions: seq"
    with pytest.raises(ExtractionError, match=expected):
        extract_operations(encoder_seq, 4, dims={"seq": 8, "sqe": 3})


def test_the_batch_is_set_by_batch_size_not_dims(encoder_seq: Path):
    expected = r"dims\.batch: 'batch' is the model's batch dimension; set it with batch_size=3"
    with pytest.raises(ExtractionError, match=expected):
        extract_operations(encoder_seq, 4, dims={"seq": 8, "batch": 3})


def test_an_unnamed_open_dimension_says_how_to_fix_the_export(tmp_path: Path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "u.onnx"))
    with pytest.raises(ExtractionError, match=r"unnamed: 'x' axis 1; export the model with a name for it"):
        extract_operations(tmp_path / "u.onnx", 2)


# ------------------------------------------------------------------------------- Hugging Face transformers


@pytest.fixture(scope="module")
def transformers_onnx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("transformers")
    from hf_models import NAMES, export_transformer

    folder = tmp_path_factory.mktemp("hf")
    return {name: export_transformer(name, folder / f"{name}.onnx") for name in NAMES}


def _dims(name: str, seq: int) -> dict[str, int]:
    return {} if name == "vit" else {"seq": seq}


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5_encoder", "distilbert", "vit"])
def test_transformers_extract_fully_with_the_shapes_onnxruntime_computes(transformers_onnx, name: str):
    path = transformers_onnx[name]
    extraction = extract_operations(path, 3, dims=_dims(name, 12))
    assert extraction.skipped == ()
    model = rebatched_model(path, 3, _dims(name, 12))
    assert mismatches(extraction, model, actual_shapes(model)) == []
    # shape arithmetic on the fixed dimensions folds: no Shape-driven Gather/Concat/Range left to measure
    operators = Counter(op.op_type for op in extraction.operations())
    assert "Range" not in operators and "ConstantOfShape" not in operators
    assert Counter(n.op_type for n in extraction.layout_nodes)["Shape"] >= 1


def test_bert_matmuls_follow_from_batch_sequence_and_config(transformers_onnx):
    from hf_models import FFN, HEADS, HIDDEN, LAYERS

    batch, seq = 3, 12
    extraction = extract_operations(transformers_onnx["bert"], batch, dims={"seq": seq})
    problems = Counter(tuple(dict(n.params)[k] for k in ("M", "K", "N", "batch")) for n in extraction.compute_nodes
                       if n.op_type == "MatMul")  # fmt: skip
    tokens, head = batch * seq, HIDDEN // HEADS
    assert problems == Counter({
        (tokens, HIDDEN, HIDDEN, 1): 4 * LAYERS,  # q, k, v, output projections
        (tokens, HIDDEN, FFN, 1): LAYERS,
        (tokens, FFN, HIDDEN, 1): LAYERS,
        (seq, head, seq, batch * HEADS): LAYERS,  # q @ k^T
        (seq, seq, head, batch * HEADS): LAYERS,  # scores @ v
    })  # fmt: skip
    assert {n.layer for n in extraction.compute_nodes if n.op_type == "Softmax"} == {
        f"/model/encoder/layer.{i}/attention/self/Softmax" for i in range(LAYERS)
    }


def test_the_sequence_length_changes_shapes_but_not_names(transformers_onnx):
    short = extract_operations(transformers_onnx["gpt2"], 2, dims={"seq": 8})
    long = extract_operations(transformers_onnx["gpt2"], 2, dims={"seq": 128})
    assert [n.layer for n in short.nodes] == [n.layer for n in long.nodes]
    assert [n.params for n in short.nodes] != [n.params for n in long.nodes]
