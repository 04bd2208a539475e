"""The onnxruntime backend runs any ONNX node alone: nodes of real exported networks with their attributes,
operations known only by canonical parameters, and a node onnxruntime rejects fails alone with its message.
The node reaches the executable through the node file the runner writes for entries that ask for it."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlbench.backends.onnxruntime.canonical import canonical_node
from dlbench.backends.onnxruntime.model import build_model
from dlbench.backends.onnxruntime.run import prepared, session_options
from dlbench.core.glue import InvalidParameters, glue_tensors
from dlbench.core.nodes import AttributeSpec, NodeSpec, TensorSpec
from dlbench.core.values import Operation
from dlbench.onnx.extract import extract_operations
from dlbench.operators.node_file import NodeEntry, nodes_path_for, read_nodes, write_nodes
from dlbench.operators.protocol import ProtocolError
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings, measure_operations

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
FAST = RunSettings(warmup=1, min_reps=2, max_reps=5, min_time_s=0.0, threads=1, timeout_s=300, rounds=1)


class Sample(nn.Module):
    """A grouped convolution with different pads per axis, a softmax over channels, an embedding and a cast."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, (3, 5), stride=2, padding=(1, 2), groups=2)
        self.emb = nn.Embedding(30, 6)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.softmax(self.conv(x), dim=1)
        return y, self.emb(ids).to(torch.float16)


def operations_with_nodes(path: Path, batch: int) -> list[Operation]:
    """Extracted operations: each carries its ONNX node, which the onnxruntime backend runs."""
    operations = extract_operations(path, batch).operations()
    assert all(op.node is not None for op in operations)
    return operations


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> list[Operation]:
    path = tmp_path_factory.mktemp("ort") / "sample.onnx"
    args = (torch.randn(1, 4, 9, 10), torch.randint(0, 30, (1, 7)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Sample(), args, str(path), input_names=["x", "ids"], dynamic_axes={"x": {0: "n"}, "ids": {0: "n"}},
            dynamo=False, opset_version=17,
        )  # fmt: skip
    return operations_with_nodes(path, 3)


def run_node(spec: NodeSpec) -> tuple[list[np.ndarray], dict[str, np.ndarray], onnx.ModelProto]:
    built = build_model(spec)
    session = ort.InferenceSession(built.model, providers=["CPUExecutionProvider"])
    return session.run(None, built.feeds), built.feeds, onnx.load_from_string(built.model)


def of_type(operations: list[Operation], op_type: str) -> Operation:
    return next(op for op in operations if op.op_type == op_type)


def test_every_node_of_an_exported_network_is_measured_through_the_node_file(sample, tmp_path: Path) -> None:
    entry = load_registry().operator("onnxruntime")
    result, files = measure_operations(entry, sample, FAST, tmp_path)
    assert result.run_error == "" and all(m.ok for m in result.measurements.values()), result.measurements
    assert files.input_csv.read_text().split() == [str(op.id) for op in sample]  # ids only
    nodes = read_nodes(nodes_path_for(files.input_csv))
    assert sorted(nodes) == [op.id for op in sample]
    assert {n.op_type for n in nodes.values()} >= {"Conv", "Softmax", "Gather", "Cast"}


def test_a_grouped_convolution_keeps_its_pads_strides_and_groups(sample) -> None:
    conv = of_type(sample, "Conv")
    (out,), _, _ = run_node(conv.node)
    # H: (9 + 2 - 3) // 2 + 1 = 5, W: (10 + 4 - 5) // 2 + 1 = 5; batch 3 after extraction
    assert out.shape == (3, 6, 5, 5) == conv.node.outputs[0].shape
    weight = conv.node.inputs[1]
    assert weight.weight and weight.shape == (6, 2, 3, 5)


def test_a_softmax_normalises_along_its_axis(sample) -> None:
    softmax = of_type(sample, "Softmax")
    (out,), _, _ = run_node(softmax.node)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_a_gather_reads_rows_of_its_table_at_indices_in_range(sample) -> None:
    gather = of_type(sample, "Gather")
    (out,), feeds, model = run_node(gather.node)
    (table,) = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    (indices,) = feeds.values()
    assert table.shape == (30, 6) and indices.shape == (3, 7) and 0 <= indices.min() and indices.max() < 30
    np.testing.assert_array_equal(out, table[indices])


def test_a_cast_produces_its_target_type(sample) -> None:
    (out,), _, _ = run_node(of_type(sample, "Cast").node)
    assert out.dtype == np.float16


def test_an_lrn_of_the_zoo_alexnet_computes_what_torch_computes() -> None:
    lrn = of_type(operations_with_nodes(ZOO / "light_bvlc_alexnet.onnx", 1), "LRN")
    (out,), feeds, _ = run_node(lrn.node)
    attrs = {a.name: a.value for a in lrn.node.attributes}
    (x,) = feeds.values()
    expected = F.local_response_norm(torch.from_numpy(x), attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"])
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("op_type", "params"),
    [
        ("Conv", dict(N=2, C=4, H=9, W=8, K=6, kernel_shape_0=3, kernel_shape_1=2, pads_0=1, pads_1=0, pads_2=2,
                      pads_3=1, strides_0=2, strides_1=1, dilations_0=1, dilations_1=2, group=2, mode=0)),
        ("Gemm", dict(M=5, K=7, N=3, transA=1, transB=0, batch=1)),
        ("MatMul", dict(M=5, K=7, N=3, transA=0, transB=0, batch=4)),
        ("Softmax", dict(N=2, C=3, H=4, W=5, axis=1, mode=0)),
        ("LayerNormalization", dict(N=1, C=2, H=4, W=8, axis=3, epsilon=1e-5, mode=0)),
        ("MaxPool", dict(N=1, C=3, H=8, W=8, kernel_shape_0=3, kernel_shape_1=3, pads_0=1, pads_1=1, pads_2=1,
                         pads_3=1, strides_0=2, strides_1=2, mode=0)),
        ("BatchNormalization", dict(N=2, C=3, H=4, W=4, epsilon=1e-5, momentum=0.9, mode=2)),
        ("BatchNormalization", dict(N=2, C=3, H=4, W=4, epsilon=1e-5, momentum=0.9, mode=0)),
        ("Gather", dict(N=1, C=1, H=30, W=6, axis=2, indices=7, mode=0)),
        ("LRN", dict(N=1, C=8, H=5, W=5, size=5, alpha=1e-4, beta=0.75, bias=1.0, mode=0)),
        ("Cast", dict(N=1, C=2, H=3, W=4, to=10, mode=0)),
        ("Concat", dict(N=2, C=7, H=4, W=5, axis=1, inputs=3, mode=0)),
        ("Split", dict(N=2, C=3, H=4, W=5, axis=3, outputs=2, mode=0)),
        ("Slice", dict(N=2, C=3, H=4, W=5, N_out=1, C_out=3, H_out=2, W_out=5, mode=0)),
        ("Expand", dict(N=2, C=1, H=4, W=1, N_out=2, C_out=3, H_out=4, W_out=5, mode=0)),
        ("Tile", dict(N=2, C=3, H=4, W=5, repeats_0=1, repeats_1=2, repeats_2=1, repeats_3=3, mode=0)),
        ("Transpose", dict(N=2, C=3, H=4, W=5, perm_0=0, perm_1=2, perm_2=3, perm_3=1, mode=0)),
        ("ReduceMean", dict(N=2, C=3, H=4, W=5, reduce_N=0, reduce_C=1, reduce_H=0, reduce_W=1, mode=0)),
        ("Where", dict(N=2, C=1, H=4, W=5, N_b=2, C_b=3, H_b=4, W_b=5, N_c=1, C_c=1, H_c=1, W_c=5, mode=0)),
        ("Sum", dict(N=2, C=3, H=4, W=5, N_b=1, C_b=3, H_b=4, W_b=5, inputs=3, mode=0)),
        ("Gelu", dict(N=2, C=3, H=4, W=5, approximate=1, mode=0)),
        ("Pow", dict(N=2, C=3, H=4, W=5, N_b=1, C_b=1, H_b=1, W_b=1, mode=0)),
        ("Clip", dict(N=2, C=3, H=4, W=5, mode=0)),
        ("Equal", dict(N=2, C=3, H=4, W=5, N_b=1, C_b=3, H_b=1, W_b=5, mode=0)),
        ("And", dict(N=2, C=3, H=4, W=5, N_b=1, C_b=1, H_b=4, W_b=5, mode=0)),
        ("IsNaN", dict(N=2, C=3, H=4, W=5, mode=0)),
        ("GatherElements", dict(N=2, C=3, H=4, W=5, N_b=2, C_b=3, H_b=7, W_b=5, axis=2, mode=0)),
    ],
)  # fmt: skip
def test_an_operation_known_by_its_parameters_becomes_the_node_they_describe(op_type: str, params: dict) -> None:
    outputs, _, _ = run_node(canonical_node(op_type, params))
    if op_type == "Conv":
        expected = [(2, 6, 5, 7)]  # H (9+3-3)//2+1, W (8+1-(2*(2-1)+1))//1+1
    elif op_type in ("Gemm", "MatMul"):
        expected = [(5, 3) if op_type == "Gemm" else (4, 5, 3)]
    elif op_type == "MaxPool":
        expected = [(1, 3, 4, 4)]
    elif op_type in ("Softmax", "LayerNormalization", "BatchNormalization"):
        expected = [tuple(params[d] for d in "NCHW")]
        if op_type == "BatchNormalization" and params["mode"] == 0:  # training: the running statistics too
            expected += [(params["C"],), (params["C"],)]
    else:
        expected = list(glue_tensors(op_type, params).outputs)
    assert [o.shape for o in outputs] == expected


def test_backward_passes_and_operators_without_an_onnx_node_are_refused_with_the_reason() -> None:
    with pytest.raises(InvalidParameters, match="forward pass"):
        canonical_node("Relu", dict(N=1, C=1, H=1, W=4, mode=1))
    with pytest.raises(InvalidParameters, match="SGD"):
        canonical_node("SGD", dict(N=1, C=1, H=1, W=4))


def test_a_zoo_batchnorm_extracted_for_training_runs_with_batch_statistics() -> None:
    """ResNet-50's opset-9 BatchNormalization, extracted for training (mode 0), runs as BatchNormalization-15
    with training_mode=1: batch statistics, as the torch backend measures it."""
    operations = operations_with_nodes(ZOO / "light_resnet50.onnx", 1)
    bn = of_type(operations, "BatchNormalization")
    assert bn.param_dict["mode"] == 0 and bn.node.opset == 9
    entry = NodeEntry(bn.op_type, bn.params, bn.node)
    built = prepared(entry, "float32")
    session = ort.InferenceSession(built.model, providers=["CPUExecutionProvider"])
    y, _, _ = session.run(None, built.feeds)
    (x,) = built.feeds.values()
    model = onnx.load_from_string(built.model)
    scale, bias = (onnx.numpy_helper.to_array(t).reshape(1, -1, 1, 1) for t in model.graph.initializer[:2])
    epsilon = next(a.f for a in model.graph.node[0].attribute if a.name == "epsilon")
    batch_mean, batch_var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    expected = scale * (x - batch_mean) / np.sqrt(batch_var + epsilon) + bias  # the batch's own statistics
    np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-3)
    (node,) = model.graph.node
    assert {a.name: a.i for a in node.attribute if a.name == "training_mode"} == {"training_mode": 1}
    assert model.opset_import[0].version == 15 and len(node.output) == 3
    inference = onnx.load_from_string(prepared(dataclasses.replace(entry, params=(("mode", 2),)), "float32").model)
    assert "training_mode" not in {a.name for a in inference.graph.node[0].attribute}


def foreign(op_type: str, domain: str, opsets: dict[str, int]) -> NodeSpec:
    x = TensorSpec((2, 3), "float32")
    return NodeSpec(op_type, domain, opsets, (x,), (TensorSpec(None, "float32"),))


def test_nodes_onnxruntime_rejects_fail_alone_with_its_message(sample, tmp_path: Path) -> None:
    good = of_type(sample, "Softmax")
    custom = Operation(
        id=100, op_type="Frobnicate", params=(), node=foreign("Frobnicate", "com.example", {"": 17, "com.example": 1})
    )
    future = Operation(id=101, op_type="Relu", params=(), node=foreign("Relu", "", {"": 1000}))
    backward = dataclasses.replace(of_type(sample, "Conv"), id=102, params=(("mode", 1),))
    canonical = Operation(id=103, op_type="Softmax", params=tuple(dict(N=1, C=2, H=3, W=4, axis=3, mode=0).items()))
    entry = load_registry().operator("onnxruntime")
    result, files = measure_operations(entry, [good, custom, future, backward, canonical], FAST, tmp_path)
    m = result.measurements
    assert m[good.id].ok and m[canonical.id].ok
    assert "Frobnicate unsupported: onnxruntime" in m[100].error and "com.example" in m[100].error
    assert "Relu unsupported: onnxruntime" in m[101].error and "1000" in m[101].error
    assert "forward pass (inference) only" in m[102].error
    assert result.run_error == ""  # the executable went on and exited normally


def test_threads_reach_the_session_and_the_version_reaches_the_tags() -> None:
    from dlbench.tracking.system import hardware_tags

    assert session_options(ort, 3).intra_op_num_threads == 3
    assert hardware_tags()["onnxruntime.version"] == ort.__version__


def test_one_registry_entry_serves_every_op_type_and_only_it_gets_a_node_file(tmp_path: Path) -> None:
    registry = load_registry()
    (entry,) = registry.serving("NeverHeardOf", backend="onnxruntime")
    assert entry.node_file and entry.param_descr == () and entry.available
    assert registry.serving("NeverHeardOf", backend="torch") == []
    relu = registry.operator("torch_relu")
    assert not relu.node_file
    op = Operation(id=0, op_type="Relu", params=tuple(dict(N=1, C=1, H=2, W=2, mode=0).items()))
    result, files = measure_operations(relu, [op], FAST, tmp_path)
    assert result.ok and not nodes_path_for(files.input_csv).exists()


def test_a_node_file_round_trips_and_a_broken_entry_fails_only_its_row(tmp_path: Path) -> None:
    spec = NodeSpec(
        "ConstantOfShape", "", {"": 17}, (TensorSpec((2,), "int64", True, (3, 4)),), (TensorSpec((3, 4), "float32"),),
        (AttributeSpec("value", "tensor", TensorSpec((1,), "float32", True, (0.5,))),), name="fill",
    )  # fmt: skip
    operation = Operation(0, "ConstantOfShape", (("?", 2),), node=spec)
    assert len({operation, dataclasses.replace(operation)}) == 1  # still a hashable value
    path = write_nodes(tmp_path / "x_nodes.json", [operation])
    entries = read_nodes(path)
    assert entries[0] == NodeEntry("ConstantOfShape", (("?", 2),), spec)
    (out,), _, _ = run_node(entries[0].node)
    np.testing.assert_array_equal(out, np.full((3, 4), 0.5, dtype=np.float32))
    data = json.loads(path.read_text())
    data["operations"]["1"] = {"op_type": "Relu", "params": [], "node": {"op_type": "Relu", "opsets": {"": 17}}}
    path.write_text(json.dumps(data))
    broken = read_nodes(path)
    assert broken[0].node == spec and broken[1].node is None and "outputs" in broken[1].problem
    path.write_text("not json")
    with pytest.raises(ProtocolError, match="x_nodes.json"):
        read_nodes(path)


def test_cold_caches_are_refused_rather_than_timed_hot(sample, tmp_path: Path) -> None:
    entry = load_registry().operator("onnxruntime")
    result, files = measure_operations(entry, sample[:1], dataclasses.replace(FAST, caches="cold"), tmp_path)
    assert not any(m.ok for m in result.measurements.values()) and "exited with status 2" in result.run_error
    assert "the onnxruntime kernels time with hot caches only" in files.stderr_txt.read_text()


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 1), (1, 0), (1, 1)])
def test_a_batched_matmul_with_a_transposed_operand_runs_as_onnxruntimes_fused_matmul(trans_a, trans_b) -> None:
    params = dict(M=5, K=7, N=3, transA=trans_a, transB=trans_b, batch=4)
    spec = canonical_node("MatMul", params)
    assert (spec.op_type, spec.domain) == ("FusedMatMul", "com.microsoft")
    (out,), feeds, _ = run_node(spec)
    a, b = feeds.values()
    a = a.transpose(0, 2, 1) if trans_a else a
    b = b.transpose(0, 2, 1) if trans_b else b
    assert out.shape == (4, 5, 3)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_every_operation_of_a_bert_export_can_be_run_alone_its_shape_arithmetic_folded(tmp_path: Path) -> None:
    # BERT slices its position ids up to Shape(input_ids)[1]: at a fixed sequence that end is a constant, and
    # so is the Slice. Measured as an operation, its end was unknown and the row went missing ("no result
    # row for id 2")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "onnx"))
    from hf_models import export_transformer

    path = export_transformer("bert", tmp_path / "bert.onnx")
    operations = extract_operations(path, 1, dims={"seq": 16}, training=False).operations()
    assert "Slice" not in {op.op_type for op in operations}
    for op in operations:  # each builds the one-node model the executable times (the Slice raised RowFailed)
        assert prepared(NodeEntry(op.op_type, op.params, op.node), "float32").feeds is not None, op
