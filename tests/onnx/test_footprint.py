"""The cache state from the step itself: the working set of an exported network's unfolded training step and
each operation's reuse distance in it (:mod:`dlbench.onnx.footprint`), checked against sizes counted by hand."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from dlbench.analysis.match import load_table
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.footprint import placed_step, step_footprint
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.onnx.unfold import load_table as load_unfold_table
from dlbench.onnx.unfold import unfold_operations

sys.path.insert(0, str(Path(__file__).parents[1] / "analysis"))
from test_predict import export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def placed(model: nn.Module, example: torch.Tensor, path: Path):
    export(model, example, path)
    batch = example.shape[0]
    extraction = extract_operations(path, batch)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, batch).with_inferred_outputs(extraction.nodes)
    unfolding = unfold_operations(forward, load_unfold_table())
    step = training_step(forward, unfolding, facts, load_table().training)
    return placed_step(step, unfolding, extraction.nodes, facts)


def test_the_working_set_of_a_tiny_mlp_step_is_every_tensor_it_touches_counted_by_hand(tmp_path: Path) -> None:
    batch, features, hidden, classes = 3, 12, 24, 5
    mlp = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
    _, decided = placed(mlp, torch.randn(batch, features), tmp_path / "mlp.onnx")
    weights = features * hidden + hidden + hidden * classes + classes  # two weights and biases
    activations = batch * features + 2 * batch * hidden + batch * classes  # input, Gemm out, Relu out, logits
    gradients = weights + 2 * batch * hidden + batch * classes  # of all but the input, which needs none
    momentum = weights  # SGD's one state tensor per parameter (assumed: no optimizer recorded)
    assert decided.working_set_bytes == 4 * (weights + activations + gradients + momentum)


def test_a_saved_activation_is_read_from_further_away_than_the_next_layers_input(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(8 * 16 * 16, 10))  # fmt: skip
    step, decided = placed(net, torch.randn(4, 3, 16, 16), tmp_path / "cnn.onnx")
    convs = [op for op in step.operations if op.op_type == "Conv"]
    forward = {op.nodes[0]: op for op in convs if step.pass_of(op.id) == "forward"}
    second = sorted(forward)[-1]  # the second convolution: reads the first ReLU's output right after it
    weight_gradient = next(op for op in convs if step.pass_of(op.id) == "backward_weights" and second in op.nodes)
    activation = decided.distances[(second, "forward")]
    (saved,) = [t for t, d in activation.items() if d == 0]  # the first ReLU's output, written just before
    # its weight gradient reads that same activation, saved since the forward pass: the whole rest of the
    # forward pass, the loss and the later layers' backward passes came between
    assert decided.distances[(second, "1")][saved] > 4 * 16 * 16 * 8 * 4 * 3  # more than three activations
    assert weight_gradient.footprint_bytes > 0
    assert all(op.footprint_bytes is not None and op.footprint_bytes <= decided.working_set_bytes
               for op in step.operations)  # fmt: skip


def test_a_larger_batch_touches_more_between_uses_so_fewer_of_its_operations_fit_a_cache(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
    small_step, small = placed(net, torch.randn(1, 3, 32, 32), tmp_path / "small.onnx")
    large_step, large = placed(net, torch.randn(16, 3, 32, 32), tmp_path / "large.onnx")
    cache = 2 * small.working_set_bytes  # a cache the small step fits in and the large one does not
    assert small.working_set_bytes < cache < large.working_set_bytes
    assert max(small.operations.values()) < cache
    assert sum(min(v, cache) for v in small.operations.values()) < sum(min(v, cache) for v in large.operations.values())
    assert any(v > cache for v in large.operations.values()), "some operation of the large step reads from memory"


def test_the_forward_pass_of_a_served_model_sees_its_weights_one_forward_apart(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    path = export(net, torch.randn(2, 64), tmp_path / "serve.onnx")
    extraction = extract_operations(path, 2, training=False)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, 2)
    decided = step_footprint(forward, {}, {}, extraction.nodes, facts, training=False)
    weights = 2 * (64 * 64 + 64)
    activations = 2 * 64 * 4  # input, first Gemm's output, ReLU's output, the output
    assert decided.working_set_bytes == 4 * (weights + activations)
    first = next(op for op in forward if op.op_type == "Gemm" and "/0/" in op.nodes[0])
    # what the first layer reads was last touched one forward ago; between then and now, in elements:
    x, w, b, h = 2 * 64, 64 * 64, 64, 2 * 64  # input, a weight, a bias, one activation
    after = {"x": w + b + h + h + w + b + h, "w": b + h + h + w + b + h, "b": h + h + w + b + h}
    mean = (x * after["x"] + w * after["w"] + b * after["b"]) / (x + w + b)  # by bytes; the output is not read
    assert math.isclose(decided.events[("/0/Gemm", "forward")], 4 * mean, abs_tol=1)
    # both layers have one shape, so one operation: its footprint is the mean of the two nodes'
    both = (decided.events[("/0/Gemm", "forward")] + decided.events[("/2/Gemm", "forward")]) / 2
    assert first.nodes == ("/0/Gemm", "/2/Gemm") and math.isclose(decided.operations[first.id], both, abs_tol=1)


def embedding_step(tmp_path: Path, tensor_dtypes: dict[str, str] | None = None):
    """A tiny step that reads int64 indices: Embedding -> Flatten -> Linear, batch 3 of 5 tokens."""
    import onnx

    net = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(5 * 4, 6))
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = export(net, torch.randint(0, 10, (3, 5)), tmp_path / "embedding.onnx")
    extraction = extract_operations(path, 3)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, 3).with_inferred_outputs(extraction.nodes)
    unfolding = unfold_operations(forward, load_unfold_table())
    step = training_step(forward, unfolding, facts, load_table().training)
    gather = next(n for n in onnx.load(str(path)).graph.node if n.op_type == "Gather")
    _, decided = placed_step(step, unfolding, extraction.nodes, facts, tensor_dtypes=tensor_dtypes)
    return decided, gather


def test_int64_indices_are_sized_at_their_own_eight_bytes_not_the_floats_four(tmp_path: Path) -> None:
    import numpy as np

    decided, gather = embedding_step(tmp_path)
    indices, embedded = gather.input[1], gather.output[0]
    assert decided.tensor_bytes[indices] == 3 * 5 * np.dtype(np.int64).itemsize
    table, activation, weight, bias, logits = 10 * 4, 3 * 5 * 4, 6 * 5 * 4, 6, 3 * 6
    floats = table + activation + weight + bias + logits
    gradients = logits + activation + weight + bias + table  # the indices have none
    momentum = table + weight + bias  # SGD's state, assumed (no optimizer recorded)
    assert decided.working_set_bytes == 8 * 3 * 5 + 4 * (floats + gradients + momentum)
    assert decided.tensor_bytes[embedded] == 4 * activation


def test_the_dtypes_a_step_ran_override_the_graphs_tensor_by_tensor(tmp_path: Path) -> None:
    plain, gather = embedding_step(tmp_path / "plain")
    embedded = gather.output[0]
    ran, _ = embedding_step(tmp_path / "ran", tensor_dtypes={embedded: "bfloat16"})  # as autocast may run it
    assert ran.tensor_bytes[embedded] == 3 * 5 * 4 * 2
    # the activation and its gradient at two bytes an element instead of four
    assert plain.working_set_bytes - ran.working_set_bytes == 2 * (3 * 5 * 4 * 2)


@pytest.mark.parametrize(
    ("optimizer", "options", "states"),
    [("SGD", {"momentum": 0.0}, 0), ("SGD", {"momentum": 0.9}, 1), ("Adam", {"amsgrad": False}, 2),
     ("Adam", {"amsgrad": True}, 3), ("RMSprop", {"momentum": 0.0, "centered": True}, 2)],
)  # fmt: skip
def test_the_optimizer_keeps_the_state_tensors_its_options_make(tmp_path: Path, optimizer, options, states) -> None:
    # torch.optim: SGD keeps a momentum buffer only with momentum; Adam two moments, amsgrad a third;
    # RMSprop its square average, a gradient average when centered, a momentum buffer with momentum
    from dlbench.onnx.update import StepRun

    batch, features, hidden, classes = 3, 12, 24, 5
    mlp = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
    path = export(mlp, torch.randn(batch, features), tmp_path / "mlp.onnx")
    extraction = extract_operations(path, batch)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(path, batch).with_inferred_outputs(extraction.nodes)
    unfolding = unfold_operations(forward, load_unfold_table())
    shapes = [list(p.shape) for p in mlp.parameters()]
    record = {"class": optimizer, "module": f"torch.optim.{optimizer.lower()}",
              "groups": [{"options": {"lr": 0.1, **options}, "shapes": shapes}]}  # fmt: skip
    step = training_step(forward, unfolding, facts, load_table().training, ran=StepRun(optimizers=(record,)))
    _, decided = placed_step(step, unfolding, extraction.nodes, facts)
    weights = features * hidden + hidden + hidden * classes + classes
    activations = batch * features + 2 * batch * hidden + batch * classes
    gradients = weights + 2 * batch * hidden + batch * classes
    assert decided.working_set_bytes == 4 * (weights + activations + gradients + states * weights)
