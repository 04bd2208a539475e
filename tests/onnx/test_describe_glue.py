"""The glue operators of real exported networks get canonical descriptors whose tensors are the node's: the
rank-4 output the parameters describe is the output ONNX inference finds, for tiny torch modules and for
the model-zoo CNNs the onnx package ships."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import onnx
import onnx.numpy_helper
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.glue import GLUE_OP_TYPES, NON_DIFFERENTIABLE, glue_tensors
from dlbench.core.shapes import rank4
from dlbench.onnx.attributes import read_attributes
from dlbench.onnx.describe import NoCanonicalForm, describe_known
from dlbench.onnx.infer import infer_shapes
from dlbench.onnx.load import light_model

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


class Glue(nn.Module):
    """One of every glue operator, as a transformer or a CNN writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.scale = nn.Parameter(torch.randn(8))

    def forward(self, ids: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        embedded = self.emb(ids)
        swapped = x.transpose(1, 2)
        joined = torch.cat([x, y, x], dim=1)
        first, second = joined.split([4, 5], dim=1)
        cut = x[:, :, 1:3, :]
        mean = x.mean(dim=-1, keepdim=True)
        total = x.sum(dim=(1, 2))
        arithmetic = torch.sqrt(x * x + 1.0) / (y - 2.0) * self.scale
        cube = torch.pow(x, 3.0)
        functions = torch.erf(x) + torch.tanh(y) + torch.sigmoid(x) + torch.exp(-x) + torch.log(y.abs() + 1)
        clipped = torch.clamp(x, 0.0, 6.0)
        chosen = torch.where(x > 0, x, y)
        larger = torch.maximum(x, y[:, :1])
        expanded = mean.expand(2, 3, 4, 8)
        tiled = x.repeat(1, 2, 1, 1)
        half = x.to(torch.float16)
        gelu = F.gelu(x, approximate="tanh")
        return (embedded, swapped, first, second, cut, total, arithmetic, cube, functions, clipped, chosen, larger,
                expanded, tiled, half, gelu)  # fmt: skip


def constant_values(model: Any) -> dict[str, list[float]]:
    values = {t.name: onnx.numpy_helper.to_array(t).reshape(-1).tolist() for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = onnx.numpy_helper.to_array(attr.t).reshape(-1).tolist()
    return values


def described_nodes(path: Path, with_outputs: bool = True) -> list[tuple[Any, Any, tuple, tuple]]:
    """(node, canonical params, input shapes, output shapes) of every glue node, shapes from dlbench's own
    inference, ``outputs`` and ``values`` handed over as extraction does."""
    model = onnx.load(path)
    light, _ = light_model(model)
    shapes = infer_shapes(light, path, [])
    values = constant_values(model)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    found = []
    for node in model.graph.node:
        if node.op_type not in GLUE_OP_TYPES:
            continue
        ins = tuple(shapes.get(i) if i else None for i in node.input)
        outs = tuple(shapes.get(o) for o in node.output)
        attrs = dict(read_attributes(node)[0])
        kwargs = {"outputs": outs, "values": [values.get(i) for i in node.input]} if with_outputs else {}
        params = describe_known(node.op_type, ins, attrs, opset, True, **kwargs)
        found.append((node, params, ins, outs))
    return found


@pytest.fixture(scope="module")
def glue_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("glue") / "glue.onnx"
    args = (torch.randint(0, 50, (2, 5)), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Glue(), args, str(path), dynamo=False, opset_version=20)
    return path


def check_against_inference(op_type: str, params: Any, outs: tuple) -> None:
    """The parameters' output, folded to rank 4, is the inferred output (element counts for Gather, whose
    indices fold into one dimension, for Split's evenly cut pieces, for reductions without keepdims and for
    ranks above 4, which fold by merging axes)."""
    assert [d for d, _ in params] == DESCRIPTORS[op_type]
    tensors = glue_tensors(op_type, dict(params))
    if op_type == "Split":
        assert sum(map(math.prod, tensors.outputs)) == sum(map(math.prod, outs))
    elif op_type in ("Gather", "ReduceSum", "ReduceMean") or len(outs[0]) > 4:
        assert math.prod(tensors.outputs[0]) == math.prod(outs[0])
    else:
        assert [rank4(op_type, s) for s in outs] == list(tensors.outputs)


def test_every_glue_node_of_an_exported_module_describes_its_own_output(glue_model: Path) -> None:
    nodes = described_nodes(glue_model)
    absent = {"Sum", "Min", "LRN", "GatherElements", *NON_DIFFERENTIABLE} - {"Greater", "Equal"}  # x > 0, expand
    assert {n.op_type for n, *_ in nodes} == set(GLUE_OP_TYPES) - absent
    for node, params, _, outs in nodes:
        assert params is not None, node.op_type
        check_against_inference(node.op_type, params, outs)


def by_type(nodes: list, op_type: str) -> list[dict]:
    return [dict(params) for node, params, *_ in nodes if node.op_type == op_type]


def test_exported_glue_nodes_get_the_expected_canonical_parameters(glue_model: Path) -> None:
    nodes = described_nodes(glue_model)
    (gather,) = by_type(nodes, "Gather")  # an embedding: 10 rows of a 50 x 8 table
    assert gather == dict(N=1, C=1, H=50, W=8, axis=2, indices=10, mode=0)
    (transpose,) = by_type(nodes, "Transpose")
    assert [transpose[f"perm_{i}"] for i in range(4)] == [0, 2, 1, 3]
    (concat,) = by_type(nodes, "Concat")
    assert concat == dict(N=2, C=9, H=4, W=8, axis=1, inputs=3, mode=0)
    (split,) = by_type(nodes, "Split")
    assert split == dict(N=2, C=9, H=4, W=8, axis=1, outputs=2, mode=0)
    slices = by_type(nodes, "Slice")
    assert dict(N=2, C=3, H=4, W=8, N_out=2, C_out=3, H_out=2, W_out=8, mode=0) in slices
    (mean,) = by_type(nodes, "ReduceMean")  # axes are an input from opset 18
    assert [mean[f"reduce_{d}"] for d in "NCHW"] == [0, 0, 0, 1]
    (total,) = by_type(nodes, "ReduceSum")  # keepdims=0
    assert [total[f"reduce_{d}"] for d in "NCHW"] == [0, 1, 1, 0]
    assert {"N_b": 1, "C_b": 1, "H_b": 1, "W_b": 8} in [
        {k: m[k] for k in ("N_b", "C_b", "H_b", "W_b")} for m in by_type(nodes, "Mul")
    ]
    (power,) = by_type(nodes, "Pow")
    assert (power["N_b"], power["C_b"], power["H_b"], power["W_b"]) == (1, 1, 1, 1)
    (largest,) = by_type(nodes, "Max")
    assert largest["inputs"] == 2 and largest["C_b"] == 1
    (tile,) = by_type(nodes, "Tile")
    assert [tile[f"repeats_{i}"] for i in range(4)] == [1, 2, 1, 1]
    (cast,) = by_type(nodes, "Cast")
    assert cast["to"] == onnx.TensorProto.FLOAT16
    (gelu,) = by_type(nodes, "Gelu")
    assert gelu["approximate"] == 1
    assert all(p["mode"] == 0 for _, params, *_ in nodes for p in [dict(params)])


def test_without_output_shapes_or_constant_values_slice_expand_and_tile_stay_undescribed(glue_model: Path) -> None:
    nodes = described_nodes(glue_model, with_outputs=False)
    undescribed = {node.op_type for node, params, *_ in nodes if params is None}
    # their extent, axes or pieces come from the output shapes or from constant inputs
    assert undescribed == {"Slice", "Expand", "Tile", "ReduceMean", "ReduceSum", "Split"}
    assert by_type([n for n in nodes if n[1] is not None], "Concat")


@pytest.mark.parametrize(
    ("model", "op_types"),
    [
        ("light_bvlc_alexnet.onnx", {"LRN"}),
        ("light_densenet121.onnx", {"Concat", "Mul"}),
        ("light_inception_v1.onnx", {"Concat", "LRN"}),
        ("light_resnet50.onnx", {"Sum"}),
        ("light_shufflenet.onnx", {"Transpose", "Concat", "Sum"}),
    ],
)
def test_the_glue_of_the_model_zoo_cnns_describes_its_own_outputs(model: str, op_types: set[str]) -> None:
    nodes = described_nodes(ZOO / model)
    assert {n.op_type for n, *_ in nodes} >= op_types
    for node, params, _, outs in nodes:
        check_against_inference(node.op_type, params, outs)


def test_shufflenets_five_dimensional_channel_shuffle_folds_to_rank_four() -> None:
    transposes = [
        (dict(p), ins) for n, p, ins, _ in described_nodes(ZOO / "light_shufflenet.onnx") if n.op_type == "Transpose"
    ]
    params, ins = transposes[0]
    assert len(ins[0]) == 5 and ins[0][0] == 1
    # (1, g, C/g, H, W) -> (0, 2, 1, 3, 4): the size-1 batch drops, H and W move together
    assert (params["C"], params["H"], params["W"]) == (ins[0][1], ins[0][2], ins[0][3] * ins[0][4])
    assert [params[f"perm_{i}"] for i in range(4)] == [0, 2, 1, 3]


def test_an_lrn_is_described_with_its_attributes() -> None:
    (lrn, *_) = [dict(p) for n, p, *_ in described_nodes(ZOO / "light_bvlc_alexnet.onnx") if n.op_type == "LRN"]
    assert lrn["size"] == 5 and lrn["alpha"] == pytest.approx(1e-4) and lrn["beta"] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("op_type", "shapes", "attrs"),
    [
        ("Mul", [(2, 3, 4, 5, 6), (1, 3, 1, 5, 1)], {}),
        ("Transpose", [(2, 3, 4, 5, 6)], {"perm": [4, 2, 0, 3, 1]}),
        ("ReduceMean", [(2, 3, 4, 5, 6)], {"axes": [0, 2, 4]}),
        ("Sum", [(2, 3), (2, 3), (1, 3)], {}),
    ],
)
def test_forms_with_no_rank_four_equivalent_are_described_by_position(op_type, shapes, attrs) -> None:
    with pytest.raises(NoCanonicalForm):
        describe_known(op_type, shapes, attrs, 17, True, outputs=[None])


def test_a_slice_of_a_leading_axis_above_rank_four_is_described_by_position() -> None:
    with pytest.raises(NoCanonicalForm, match="leading axes"):
        describe_known("Slice", [(2, 3, 4, 5, 6), (1,), (1,)], {}, 17, True, outputs=[(2, 2, 4, 5, 6)])
    inner = dict(describe_known("Slice", [(2, 3, 4, 5, 6), (1,), (1,)], {}, 17, True, outputs=[(2, 3, 4, 5, 2)]))
    assert (inner["N"], inner["W"], inner["N_out"], inner["W_out"]) == (6, 6, 6, 2)


def test_rank_five_broadcasting_and_reductions_merge_neighbouring_axes() -> None:
    mul = dict(describe_known("Mul", [(2, 3, 4, 5, 6), (1, 1, 4, 5, 6)], {}, 17, True))
    assert (mul["N"], mul["C"], mul["N_b"], mul["C_b"]) == (6, 4, 1, 4)
    mean = dict(describe_known("ReduceMean", [(2, 3, 4, 5, 6)], {"axes": [3, 4]}, 17, True))
    assert (mean["N"], mean["C"], mean["H"], mean["W"]) == (6, 4, 5, 6)
    assert [mean[f"reduce_{d}"] for d in "NCHW"] == [0, 0, 1, 1]
    concat = dict(describe_known("Concat", [(2, 3, 4, 5, 6), (2, 1, 4, 5, 6)], {"axis": 1}, 17, True))
    assert (concat["N"], concat["C"], concat["H"], concat["W"], concat["axis"]) == (1, 2, 4, 120, 2)


def test_constant_values_may_be_numpy_arrays_as_extraction_folds_them() -> None:
    import numpy as np

    total = dict(
        describe_known("ReduceSum", [(2, 3, 4), (1,)], {"keepdims": 0}, 13, True, values=[None, np.array([1])])
    )
    assert [total[f"reduce_{d}"] for d in "NCHW"] == [0, 0, 1, 0]
    tile = dict(describe_known("Tile", [(2, 3), (2,)], {}, 13, True, values=[None, np.array([2, 1])]))
    assert [tile[f"repeats_{i}"] for i in range(4)] == [1, 1, 2, 1]
    every = dict(describe_known("ReduceMean", [(2, 3), (0,)], {}, 18, True, values=[None, np.array([], np.int64)]))
    assert [every[f"reduce_{d}"] for d in "NCHW"] == [0, 0, 1, 1]  # empty axes: all of them


def test_comparisons_logic_predicates_and_gather_elements_get_their_descriptors() -> None:
    equal = dict(describe_known("Equal", [(1, 16), (16,)], {}, 17, True))
    assert (equal["H"], equal["W"], equal["H_b"], equal["W_b"], equal["mode"]) == (1, 16, 1, 16, 0)
    assert [d for d, _ in describe_known("And", [(2, 3), (2, 3)], {}, 17, True)] == DESCRIPTORS["And"]
    assert dict(describe_known("IsNaN", [(2, 3)], {}, 17, True)) == dict(N=1, C=1, H=2, W=3, mode=0)
    gathered = dict(describe_known("GatherElements", [(4, 9), (4, 2)], {"axis": 1}, 17, True))
    assert gathered == dict(N=1, C=1, H=4, W=9, N_b=1, C_b=1, H_b=4, W_b=2, axis=3, mode=0)
    assert glue_tensors("GatherElements", gathered).outputs == ((1, 1, 4, 2),)
