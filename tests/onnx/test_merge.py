"""Merging identical operations never changes what an operation is: nodes merge only when their inputs,
outputs and attributes agree, and the merged operation keeps its ONNX node, which the onnxruntime backend
then runs (inception_v1's Concats of 192+208+48+64 and 160+224+64+64 channels share ``C=512, inputs=4``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import onnx
import pytest

from dlbench.core.values import Measurement, SweepResult, TimeStats
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.operators.node_file import nodes_path_for
from dlbench.operators.registry import load_registry
from dlbench.operators.reuse import ReuseKey, ReuseStore
from dlbench.operators.runner import RunSettings, measure_operations

INCEPTION = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_inception_v1.onnx"
QUICK = RunSettings(warmup=0, min_reps=1, max_reps=2, min_time_s=0.0, threads=1, timeout_s=300, rounds=1)


@pytest.fixture(scope="module")
def inception():
    extraction = extract_operations(INCEPTION, 1)
    return extraction, deduplicate(extraction.operations())


def _concats_of_512_channels(merged) -> list:
    return [
        op for op in merged if op.op_type == "Concat" and dict(op.params)["C"] == 512 and dict(op.params)["H"] == 13
    ]


def _node_shapes(node) -> list:
    return [None if t is None else list(t.shape) for t in node.inputs]


def test_every_merged_node_has_the_inputs_its_operation_describes(inception):
    extraction, merged = inception
    shapes_of = {n.name: [None if s is None else list(s) for s in n.input_shapes] for n in extraction.compute_nodes}
    assert sum(op.count for op in merged) == len(extraction.compute_nodes)
    assert any(op.count > 1 for op in merged), "identical convolutions still merge"
    for op in merged:
        assert op.node is not None, f"{op.label} lost its ONNX node in the merge"
        for name in op.nodes:
            assert shapes_of[name] == _node_shapes(op.node), f"{name} merged into {op.label} with other inputs"


def test_concats_with_the_same_output_but_other_inputs_stay_apart(inception):
    _, merged = inception
    concats = {tuple(s[1] for s in op.input_shapes): op for op in _concats_of_512_channels(merged)}
    assert set(concats) == {(192, 208, 48, 64), (160, 224, 64, 64), (128, 256, 64, 64)}
    assert all(op.count == 1 for op in concats.values())
    assert concats[(160, 224, 64, 64)].nodes == ("n66",)


def test_the_onnxruntime_backend_is_given_each_merged_concats_own_node(inception, tmp_path: Path):
    _, merged = inception
    concats = [op for op in merged if op.op_type == "Concat"]
    entry = load_registry().operator("onnxruntime")
    result, files = measure_operations(entry, concats, QUICK, tmp_path)
    # measured, each one: on a loaded machine a node's threads may wait for cores (``contended``), which
    # says how trustworthy its time is, not whether the backend was given the right node
    statuses = {op.id: result.measurements[op.id].status for op in concats}
    assert set(statuses.values()) <= {"ok", "contended"}, statuses
    given = json.loads(nodes_path_for(files.input_csv).read_text())["operations"]
    for op in concats:
        node = given[str(op.id)]["node"]
        assert node is not None and [t["shape"] for t in node["inputs"]] == [list(s) for s in op.input_shapes]


def test_the_reuse_store_does_not_hand_one_concats_time_to_another(inception, tmp_path: Path):
    _, merged = inception
    apart = [
        op for op in merged if op.op_type == "Concat" and dict(op.params)["C"] == 512 and dict(op.params)["H"] == 13
    ]
    first, others = apart[0], apart[1:]
    key = ReuseKey("host", "onnxruntime", "python -m ort", "cpu", "float32", 1, {"warmup": 0}, "0")
    store = ReuseStore(tmp_path / "reuse.db")
    sweep = SweepResult({first.id: Measurement(first.id, TimeStats.from_samples([0.1, 0.2]))})
    assert store.record(key, [first], sweep, {}, "run-a") == 1
    assert store.lookup(key, others) == {}
    assert set(store.lookup(key, [replace(first, id=99, nodes=("elsewhere",))])) == {99}, "the same node is reused"
