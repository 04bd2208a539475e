"""GradScaler's own operators as ``torch.amp.GradScaler`` runs them each step (the same code on the CPU and
on CUDA): the unscale of the gradients with its non-finite check
(``torch._amp_foreach_non_finite_check_and_unscale_``, AmpUnscale) and the scale's update
(``torch._amp_update_scale_``, AmpUpdateScale). The loss's scaling is a Mul by a one-element tensor, and the
casts autocast inserts are Cast rows (:mod:`dlbench.backends.torch.pointwise`)."""

from __future__ import annotations

import itertools

import torch

from dlbench.backends.torch.params import Pass, UnsupportedRow, integer, positive

#: GradScaler's defaults: the first scale, its growth, backoff and growth interval
INITIAL_SCALE, GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL = 2.0**16, 2.0, 0.5, 2000


def gradient_list(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    """``elements`` split evenly over ``tensors`` 1-D gradients of ``dtype``."""
    positive(p, "tensors", "elements")
    elements, tensors = integer(p, "elements"), integer(p, "tensors", 1)
    if elements < tensors:
        raise UnsupportedRow(f"elements={elements} are fewer than tensors={tensors}")
    base, extra = divmod(elements, tensors)
    return [torch.randn(base + (1 if i < extra else 0), device=device, dtype=dtype) for i in range(tensors)]


def amp_unscale(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """Every gradient multiplied by the inverse scale in place, and checked for inf and NaN. The calls take
    turns between 2^-16 and 2^16, so the repeated in-place products keep their magnitude (a fixed 2^-16 would
    reach subnormals, slow on a CPU, within ten calls) while each call does the multiply a step does."""
    grads = gradient_list(p, device, dtype)
    found_inf = torch.zeros(1, device=device, dtype=torch.float32)
    inverse = itertools.cycle(
        [torch.full((1,), factor, device=device, dtype=torch.float32) for factor in (1 / INITIAL_SCALE, INITIAL_SCALE)]
    )

    def unscale() -> torch.Tensor:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, next(inverse))
        return found_inf

    return Pass(unscale, tuple(grads))


def amp_update_scale(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """The update of ``N`` scales (1: GradScaler keeps one) after a step without inf or NaN: the growth tracker
    counts, and every 2000 steps (GradScaler's ``growth_interval``) the scale doubles. One-element float32
    tensors whatever the row's dtype."""
    positive(p, "N")
    scales = [torch.full((1,), INITIAL_SCALE, device=device, dtype=torch.float32) for _ in range(integer(p, "N", 1))]
    trackers = [torch.zeros(1, device=device, dtype=torch.int32) for _ in scales]
    found_inf = torch.zeros(1, device=device, dtype=torch.float32)

    def update() -> None:
        for scale, tracker in zip(scales, trackers, strict=True):
            torch._amp_update_scale_(scale, tracker, found_inf, GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL)

    return Pass(update, (*scales, *trackers, found_inf))
