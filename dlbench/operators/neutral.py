"""Neutral descriptor values, as data: the value at which leaving a descriptor out of an implementation's
``param_descr`` still poses the same problem. An operation whose dropped descriptor has any other value
(a grouped or depthwise convolution for an implementation without ``group``, a transposed GEMM for one
without ``transA``) is a different problem there, so that implementation does not serve it.

Each entry is one of:
  a number        the descriptor may be dropped only when it has this value;
  ``SAME("d")``   only when it equals descriptor ``d`` (asymmetric pads: ``pads_2`` may go when it equals
                  ``pads_0``, i.e. the padding is symmetric); ``d`` itself must be kept or neutral;
  ``ANY``         its value does not change the work measured (numerical constants such as epsilon).
A descriptor that is not listed may not be dropped at all: dlbench cannot know what its value means.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.core.values import Number


@dataclass(frozen=True)
class Same:
    """Neutral when equal to another descriptor of the same operation."""

    descriptor: str


ANY = "any"
Neutral = Number | Same | str

NEUTRAL: dict[str, Neutral] = {
    # convolution and pooling windows
    "group": 1,
    "dilations_0": 1,
    "dilations_1": 1,
    "dilations_2": 1,
    "strides_0": 1,
    "strides_1": 1,
    "strides_2": 1,
    "pads_0": 0,
    "pads_1": 0,
    "pads_2": Same("pads_0"),
    "pads_3": Same("pads_1"),
    # added descriptors, so implementations without them (the native kernels) still serve the operations
    # they pose the same problem as: a convolution without a bias, a pool whose ceil mode adds no window
    "has_bias": 0,
    "ceil_mode": 0,
    # GEMM / MatMul
    "transA": 0,
    "transB": 0,
    "batch": 1,
    # the pass: a dropped mode would measure the forward problem instead of a backward one
    "mode": 0,
    # the second operand of a broadcasting Add: neutral when it has the first one's shape
    "N_b": Same("N"),
    "C_b": Same("C"),
    "H_b": Same("H"),
    "W_b": Same("W"),
    # numerical constants: the same work whatever their value
    "epsilon": ANY,
    "momentum": ANY,
}

#: Descriptors added after operations were first described without them: an operation that lacks one (a stored
#: operation, a configured benchmark that leaves it out) poses the problem at this value.
ADDED: dict[str, Number] = {"has_bias": 0, "ceil_mode": 0}
