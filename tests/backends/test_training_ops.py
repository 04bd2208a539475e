"""The training-step benchmarks of the torch backend compute what training computes: the cross-entropy loss and
the two aten ops its backward runs, and the framework microbenchmark's one-element operator chains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlbench.analysis.predict import ExtraTerm, framework_terms
from dlbench.backends.torch.params import UnsupportedRow
from dlbench.backends.torch.training_ops import cross_entropy, dispatch

CPU = torch.device("cpu")


def test_the_loss_forward_is_cross_entropy_and_its_backward_is_autograds_gradient() -> None:
    torch.manual_seed(0)
    forward = cross_entropy({"N": 6, "C": 5, "mode": 0}, CPU, torch.float32)
    torch.manual_seed(0)
    logits, targets = torch.randn(6, 5), torch.randint(0, 5, (6,))
    assert torch.allclose(forward(), F.cross_entropy(logits, targets))
    torch.manual_seed(0)
    backward = cross_entropy({"N": 6, "C": 5, "mode": 1}, CPU, torch.float32)
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, targets).backward()
    assert torch.allclose(backward(), leaf.grad, atol=1e-6)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_the_framework_chain_runs_its_operators_and_builds_a_graph_only_when_asked(mode: int) -> None:
    chain = dispatch({"ops": 8, "mode": mode}, CPU, torch.float32)
    with torch.no_grad():  # the benchmark loop runs under no_grad: recording must switch autograd on itself
        out = chain()
    if mode == 0:
        assert out.grad_fn is None
    elif mode == 1:
        assert out.grad_fn is not None and type(out.grad_fn).__name__ == "MulBackward0"
    else:
        assert out is None


def test_an_unknown_mode_is_refused_for_the_row() -> None:
    with pytest.raises(UnsupportedRow, match="mode=3"):
        dispatch({"ops": 8, "mode": 3}, CPU, torch.float32)
    with pytest.raises(UnsupportedRow, match="mode=2"):
        cross_entropy({"N": 2, "C": 3, "mode": 2}, CPU, torch.float32)


def test_framework_terms_count_only_what_autograd_adds_to_a_dispatch() -> None:
    terms = framework_terms(10, 4, {"dispatch": 0.002, "recording": 0.003, "engine": 0.0055})
    assert [(t.name, round(t.ms, 9)) for t in terms] == [
        ("framework: layout-only operators", 0.008),
        ("framework: recording", 0.01),
        ("framework: engine", 0.035),
    ]
    assert all(isinstance(t, ExtraTerm) for t in terms) and "4 nodes" in terms[0].source
    assert framework_terms(10, 4, {}) == []
    assert framework_terms(0, 0, {"dispatch": 1.0, "recording": 2.0}) == []
