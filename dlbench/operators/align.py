"""Fit an operation's parameters to a benchmark's ``param_descr``: by descriptor, by permutation strategy
over the input shapes, or by order, in that preference. Descriptors the fit leaves out must have their
neutral value (:mod:`dlbench.operators.neutral`), or the implementation would silently measure another
problem: then it does not serve the operation."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dlbench.core.values import Measurement, Number, Operation
from dlbench.operators.neutral import ADDED, ANY, NEUTRAL, Neutral, Same

log = logging.getLogger(__name__)


class AlignmentError(ValueError):
    """An operation's parameters cannot be fitted to a benchmark's ``param_descr``."""


class ProblemChanged(AlignmentError):
    """The fit would drop a descriptor whose value changes the problem (a grouped convolution for an
    implementation without ``group``): the implementation does not serve this operation."""


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
    whole_operation_given: bool = False,
) -> list[Number]:
    """Parameter values for ``operation`` in ``param_descr`` order.

    A descriptor dropped on the way makes the operation unsupported when its value changes the problem
    (see :mod:`dlbench.operators.neutral`), unless ``whole_operation_given``: the executable reads every
    descriptor and the node itself from the node file, so nothing is lost.

    A descriptor added later (``ADDED`` in :mod:`dlbench.operators.neutral`: a Conv's ``has_bias``, a pool's
    ``ceil_mode``) that the operation lacks takes the value it had before it was added.

    1. Every descriptor found by name: reorder, discard the surplus.
    2. Otherwise the first permutation strategy that fits the operation's input shapes.
    3. Otherwise descriptors found by name keep their values and the remaining slots take the
       operation's unmatched parameters in order (logged as a warning, since it is a guess).
    """
    named = {**{d: ADDED[d] for d in param_descr if d in ADDED}, **operation.param_dict}
    if all(d in named for d in param_descr):
        if not whole_operation_given:
            _refuse_changed_problem(operation, param_descr, (), entry_name)
        return [named[d] for d in param_descr]
    for strategy in permutations:
        values = strategy.apply(operation.input_shapes)
        if values is not None:
            if len(values) != len(param_descr):
                raise AlignmentError(
                    f"{entry_name}: permutation {strategy.text!r} yields {len(values)} values, "
                    f"param_descr has {len(param_descr)}"
                )
            if not whole_operation_given:
                _refuse_changed_problem(operation, param_descr, (), entry_name)
            return values
    unmatched = [(d, v) for d, v in operation.params if d == "?" or d not in param_descr]
    leftovers = [v for _, v in unmatched]
    missing = [d for d in param_descr if d not in named]
    if len(leftovers) < len(missing):
        raise AlignmentError(
            f"{entry_name}: operation {operation.id} ({operation.label}) lacks "
            f"{', '.join(missing)}; it has {', '.join(d for d, _ in operation.params) or 'no parameters'}"
        )
    if not whole_operation_given:
        _refuse_changed_problem(operation, param_descr, [d for d, _ in unmatched[: len(missing)]], entry_name)
    log.warning(
        "%s: operation %s: descriptors %s not found by name; assigned by order from the unmatched parameters",
        entry_name,
        operation.id,
        ", ".join(missing),
    )
    fill = iter(leftovers)
    return [named[d] if d in named else next(fill) for d in param_descr]


def changed_descriptors(
    operation: Operation, param_descr: Sequence[str], used: Sequence[str] = (), neutral: dict[str, Neutral] = NEUTRAL
) -> list[str]:
    """``descriptor=value`` of each named parameter the fit drops although its value matters (``used``:
    descriptors that filled another slot by order, so are not dropped)."""
    named = operation.param_dict
    kept = set(param_descr) | set(used)
    changed = []
    for descriptor, value in named.items():
        if descriptor in kept:
            continue
        rule = neutral.get(descriptor)
        if rule == ANY:
            continue
        if isinstance(rule, Same):
            if named.get(rule.descriptor) != value:
                changed.append(f"{descriptor}={value:g} (not equal to {rule.descriptor})")
        elif rule is None:
            changed.append(f"{descriptor}={value:g} (no neutral value is known for it)")
        elif value != rule:
            changed.append(f"{descriptor}={value:g} (only {rule:g} may be left out)")
    return changed


def _refuse_changed_problem(
    operation: Operation, param_descr: Sequence[str], used: Sequence[str], entry_name: str
) -> None:
    changed = changed_descriptors(operation, param_descr, used)
    if changed:
        raise ProblemChanged(
            f"{entry_name}: its param_descr has no {', '.join(c.split('=')[0] for c in changed)}, so it would "
            f"measure another problem than operation {operation.id} ({operation.label}): {'; '.join(changed)}"
        )


def misfit(operation_id: int, err: AlignmentError) -> Measurement:
    """The measurement of an operation that could not be fitted: ``unsupported`` when the implementation
    would pose another problem, failed otherwise."""
    if isinstance(err, ProblemChanged):
        return Measurement(operation_id, None, f"unsupported: {err}", unsupported=True)
    return Measurement(operation_id, None, f"parameters do not fit: {err}")
