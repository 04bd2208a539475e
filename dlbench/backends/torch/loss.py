"""The training step's losses besides cross entropy (:mod:`dlbench.backends.torch.training_ops`), at the shape the
script ran them, mean reduction (the default of every torch loss): mode 0 the forward, mode 1 the backward as
autograd runs it (its aten backward operator, or the composite backward BCE-with-logits runs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.backends.torch.params import (
    Pass,
    UnsupportedRow,
    aten,
    autograd_pass,
    integer,
    mode_of,
    positive,
    randn,
    shape4,
)

#: ``reduction`` argument of the aten loss ops: mean
_MEAN = 1
_IGNORE = -100


def mse_loss(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    x, target = randn(shape4(p), device, dtype), randn(shape4(p), device, dtype)
    if mode_of(p) == 0:
        return Pass(lambda: F.mse_loss(x, target), (x, target))
    grad = torch.ones((), device=device, dtype=dtype)
    return Pass(lambda: aten.mse_loss_backward(grad, x, target, _MEAN), (x, target), (grad,))


def bce_with_logits(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    x = randn(shape4(p), device, dtype)
    target = (torch.rand(shape4(p), device=device) < 0.5).to(dtype)
    if mode_of(p) == 0:
        return Pass(lambda: F.binary_cross_entropy_with_logits(x, target), (x, target))
    return autograd_pass(F.binary_cross_entropy_with_logits, [x, target], [0])  # the gradient of the logits


def nll_loss(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """``N`` rows of log-probabilities over ``C`` classes (the network's log_softmax is not the loss's)."""
    positive(p, "N", "C")
    rows, classes = integer(p, "N"), integer(p, "C")
    log_probs = F.log_softmax(randn((rows, classes), device, dtype), 1)
    targets = torch.randint(0, classes, (rows,), device=device)
    mode = integer(p, "mode", 0)
    if mode == 0:
        return Pass(lambda: F.nll_loss(log_probs, targets), (log_probs, targets))
    if mode != 1:
        raise UnsupportedRow(f"mode={mode}: NLLLoss has 0 forward, 1 backward")
    total_weight = torch.tensor(float(rows), device=device, dtype=dtype)
    grad = torch.ones((), device=device, dtype=dtype)
    return Pass(
        lambda: aten.nll_loss_backward(grad, log_probs, targets, None, _MEAN, _IGNORE, total_weight),
        (log_probs, targets),
        (grad,),
    )
