"""The cache footprint of a real bfloat16 autocast step sized in the dtypes it ran
(:mod:`dlbench.analysis.ran_as_tensors`): its activations at 2 bytes an element, each weight's bfloat16 copy a
tensor of its own next to its float32 master, checked against sizes counted by hand from the shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlbench.analysis.ran_as_tensors import placed_as_ran
from dlbench.onnx.footprint import placed_step

sys.path.insert(0, str(Path(__file__).parent))
from test_ran_as import evaluated_step  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_a_bfloat16_steps_gemm_reads_two_byte_tensors_and_its_weights_cast_copy(tmp_path: Path) -> None:
    e = evaluated_step(tmp_path, "bf16", channels_last=False)
    placed, decided = placed_as_ran(e.ran, e.unfolding, e.nodes, e.graph, "float32")
    batch, features, classes = 4, 8 * 8 * 8, 10  # TinyNet's Linear reads the flattened 8x8x8 activation
    gemm = next(n for n in e.nodes if n.op_type == "Gemm")
    reads = decided.distances[(gemm.name, "forward")]
    (activation,) = [t for t in reads if t.startswith("/Relu")]  # through the Flatten, a view of the ReLU's
    assert decided.tensor_bytes[activation] == batch * features * 2
    # the weight is cast once per forward: its bfloat16 copy is what the GEMM reads; the float32 master
    # stays, read by the cast and the optimizer
    assert set(reads) == {activation, "fc.weight@bfloat16", "fc.bias@bfloat16"}
    assert decided.tensor_bytes["fc.weight@bfloat16"] == classes * features * 2
    assert decided.tensor_bytes["fc.weight"] == classes * features * 4
    assert "fc.weight" in decided.distances[("fc.weight", "optimizer")]
    # between the ReLU writing the activation and the GEMM reading it, the casts of the weight and the bias
    # read the masters and wrote the copies
    assert reads[activation] == (classes * features + classes) * (4 + 2)
    # the step's Cast operation of that weight takes its footprint from the cast's own reuse distances
    (weight_cast,) = [op for op in placed.operations if op.op_type == "Cast" and op.dtype == "float32"
                      and op.param_dict["H"] * op.param_dict["W"] == classes * features]  # fmt: skip
    assert weight_cast.footprint_bytes == decided.events[("autocast:fc.weight@bfloat16", "forward")]


def test_a_float32_step_is_sized_as_the_graph_says(tmp_path: Path) -> None:
    e = evaluated_step(tmp_path, "none", channels_last=False)
    _, as_ran = placed_as_ran(e.ran, e.unfolding, e.nodes, e.graph, "float32")
    _, graph = placed_step(e.ran, e.unfolding, e.nodes, e.graph)
    assert as_ran == graph


def test_a_batch_read_through_a_flatten_is_cast_once_into_its_own_two_byte_copy(tmp_path: Path) -> None:
    from dataclasses import replace

    import torch
    from test_predict import export
    from torch import nn

    from dlbench.analysis.match import load_table
    from dlbench.onnx.extract import extract_operations
    from dlbench.onnx.opdb import deduplicate
    from dlbench.onnx.step import graph_facts, training_step
    from dlbench.onnx.unfold import load_table as load_unfold_table
    from dlbench.onnx.unfold import unfold_operations

    batch = 3
    path = export(
        nn.Sequential(nn.Flatten(), nn.Linear(2 * 5 * 5, 6)), torch.randn(batch, 2, 5, 5), tmp_path / "m.onnx"
    )
    extraction = extract_operations(path, batch)
    forward = deduplicate(extraction.operations())
    graph = graph_facts(path, batch).with_inferred_outputs(extraction.nodes)
    unfolding = unfold_operations(forward, load_unfold_table())
    step = training_step(forward, unfolding, graph, load_table().training)
    ran = replace(step, operations=tuple(replace(op, dtype="bfloat16") if op.op_type == "Gemm" else op
                                         for op in step.operations))  # fmt: skip
    _, decided = placed_as_ran(ran, unfolding, extraction.nodes, graph, "float32")
    (batch_input,) = [
        t for t in decided.tensor_bytes if "@" not in t and t in graph.node_inputs[extraction.nodes[0].name]
    ]
    assert decided.tensor_bytes[batch_input] == batch * 2 * 5 * 5 * 4
    assert decided.tensor_bytes[f"{batch_input}@bfloat16"] == batch * 2 * 5 * 5 * 2
