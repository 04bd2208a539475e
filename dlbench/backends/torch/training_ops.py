"""What a training step runs besides the network's operators, as benchmarks of their own: the cross-entropy loss
at the logits' real shape (forward, and the two aten ops its backward runs), and the framework's per-operator
cost (dispatch, autograd recording, the autograd engine) measured on operators too small to compute anything."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import UnsupportedRow, aten, integer, positive, randn

#: ``reduction`` argument of the aten loss ops: mean, as F.cross_entropy's default
_MEAN = 1
_IGNORE = -100


def cross_entropy(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    """``SoftmaxCrossEntropyLoss`` on ``N`` rows of ``C`` classes: mode 0 the forward (log_softmax + nll_loss),
    mode 1 its backward as autograd runs it (nll_loss_backward, which zeroes a logits-sized gradient and
    scatters into it, then _log_softmax_backward_data)."""
    positive(p, "N", "C")
    rows, classes, mode = integer(p, "N"), integer(p, "C"), integer(p, "mode", 0)
    logits = randn((rows, classes), device, dtype)
    targets = torch.randint(0, classes, (rows,), device=device)
    if mode == 0:
        return lambda: F.cross_entropy(logits, targets)
    if mode != 1:
        raise UnsupportedRow(f"mode={mode}: SoftmaxCrossEntropyLoss has 0 forward, 1 backward")
    log_probs = F.log_softmax(logits, 1)
    total_weight = torch.tensor(float(rows), device=device, dtype=dtype)
    grad_loss = torch.ones((), device=device, dtype=dtype)

    def backward() -> object:
        grad = aten.nll_loss_backward(grad_loss, log_probs, targets, None, _MEAN, _IGNORE, total_weight)
        return aten._log_softmax_backward_data(grad, log_probs, 1, dtype)

    return backward


def dispatch(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    """``FrameworkOverhead``: ``ops`` one-element multiplications per call, so the time is the framework's and
    not the arithmetic's. mode 0: plain dispatch; mode 1: with autograd recording (each op makes a graph
    node, as a training forward does); mode 2: the autograd engine running ``ops`` such nodes backward."""
    positive(p, "ops")
    ops, mode = integer(p, "ops"), integer(p, "mode", 0)
    if mode not in (0, 1, 2):
        raise UnsupportedRow(f"mode={mode}: FrameworkOverhead has 0 dispatch, 1 autograd recording, 2 backward")
    x = randn((1,), device, dtype, grad=mode > 0)

    def chain() -> torch.Tensor:
        y = x
        for _ in range(ops):
            y = torch.mul(y, 1.0)
        return y

    if mode == 0:
        return chain

    def record() -> object:
        with torch.enable_grad():
            return chain()

    if mode == 1:
        return record
    with torch.enable_grad():
        graph = chain().sum()

    def engine() -> None:
        with torch.enable_grad():
            graph.backward(retain_graph=True)

    return engine
