"""Fit an operation's parameters to a benchmark's ``param_descr``: by descriptor, by permutation strategy
over the input shapes, or by order, in that preference."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dlbench.core.values import Number, Operation

log = logging.getLogger(__name__)


class AlignmentError(ValueError):
    """An operation's parameters cannot be fitted to a benchmark's ``param_descr``."""


class PermutationError(ValueError):
    """A permutation strategy that does not parse."""


_STRATEGY = re.compile(r"^\s*([A-Za-z]*(?:\s*,\s*[A-Za-z]*)*)\s*->\s*([A-Za-z0-9]+)\s*$")


@dataclass(frozen=True)
class Permutation:
    """A strategy ``ab,bc -> abc00``: letters name dimensions of the input shapes (one group per input,
    the same letter means the same size), the right side lists the parameters, digits as constants."""

    inputs: tuple[str, ...]
    output: str
    text: str

    @classmethod
    def parse(cls, text: str) -> Permutation:
        if not isinstance(text, str):
            raise PermutationError(f"permutation {text!r}: expected a string like 'ab,bc -> abc00'")
        match = _STRATEGY.match(text)
        if not match:
            raise PermutationError(f"permutation {text!r}: expected the form 'ab,bc -> abc00'")
        inputs = tuple(part.strip() for part in match.group(1).split(","))
        output = match.group(2)
        known = set("".join(inputs))
        for letter in output:
            if letter.isalpha() and letter not in known:
                raise PermutationError(f"permutation {text!r}: {letter!r} on the right names no input dimension")
        return cls(inputs=inputs, output=output, text=text)

    def apply(self, shapes: Sequence[Sequence[int]]) -> list[int] | None:
        """The parameters for these input shapes, or None when the shapes do not fit the pattern."""
        if len(shapes) != len(self.inputs):
            return None
        sizes: dict[str, int] = {}
        for pattern, shape in zip(self.inputs, shapes, strict=True):
            if len(pattern) != len(shape):
                return None
            for letter, size in zip(pattern, shape, strict=True):
                if sizes.setdefault(letter, int(size)) != int(size):
                    return None
        return [sizes[c] if c.isalpha() else int(c) for c in self.output]


def parse_param_descr(param_descr: object, where: str = "param_descr") -> list[str]:
    """Accept a list of names or the original comma-separated string."""
    if isinstance(param_descr, str):
        names = [part.strip() for part in param_descr.split(",")]
    elif isinstance(param_descr, Sequence):
        names = [str(part).strip() for part in param_descr]
    else:
        raise AlignmentError(f"{where}: expected a list of descriptor names, got {type(param_descr).__name__}")
    if not names or any(not n for n in names):
        raise AlignmentError(f"{where}: empty descriptor in {param_descr!r}")
    return names


def align_operation(
    operation: Operation,
    param_descr: Sequence[str],
    permutations: Sequence[Permutation] = (),
    entry_name: str = "",
) -> list[Number]:
    """Parameter values for ``operation`` in ``param_descr`` order.

    1. Every descriptor found by name: reorder, discard the surplus.
    2. Otherwise the first permutation strategy that fits the operation's input shapes.
    3. Otherwise descriptors found by name keep their values and the remaining slots take the
       operation's unmatched parameters in order (logged as a warning, since it is a guess).
    """
    named = operation.param_dict
    if all(d in named for d in param_descr):
        return [named[d] for d in param_descr]
    for strategy in permutations:
        values = strategy.apply(operation.input_shapes)
        if values is not None:
            if len(values) != len(param_descr):
                raise AlignmentError(
                    f"{entry_name}: permutation {strategy.text!r} yields {len(values)} values, "
                    f"param_descr has {len(param_descr)}"
                )
            return values
    leftovers = [v for d, v in operation.params if d == "?" or d not in param_descr]
    missing = [d for d in param_descr if d not in named]
    if len(leftovers) < len(missing):
        raise AlignmentError(
            f"{entry_name}: operation {operation.id} ({operation.label}) lacks "
            f"{', '.join(missing)}; it has {', '.join(d for d, _ in operation.params) or 'no parameters'}"
        )
    log.warning(
        "%s: operation %s: descriptors %s not found by name; assigned by order from the unmatched parameters",
        entry_name,
        operation.id,
        ", ".join(missing),
    )
    fill = iter(leftovers)
    return [named[d] if d in named else next(fill) for d in param_descr]
