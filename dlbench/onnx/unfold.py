"""Training unfolding: each forward operation also yields the problems of its backward pass, following a
strategy table kept as data (``conf/unfold/default.yaml``) that this module only interprets. A rule may also
declare a pass that runs but derives no problem: one that costs nothing (a view, a gradient passed through)
or one no benchmark can pose (not predicted); both are kept, with why, so no pass goes unnamed."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench import CONF_DIR
from dlbench.core.descriptors import DESCRIPTORS, operation_cost
from dlbench.core.glue import NO_GRADIENT, carries_gradient
from dlbench.core.tables import load_mapping
from dlbench.core.values import Number, Operation

DEFAULT_TABLE = CONF_DIR / "unfold" / "default.yaml"


class UnfoldError(ValueError):
    """A strategy table that does not parse, or a rule that does not fit an operation."""


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
#: Functions an expression may call (the size of a broadcast dimension is ``max(N, N_b)``).
_FUNCTIONS: dict[str, Callable[..., Any]] = {"max": max, "min": min}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@dataclass(frozen=True)
class Expression:
    """Arithmetic and comparisons over descriptor names, parsed once and evaluated without ``eval``."""

    text: str
    tree: ast.expr

    @classmethod
    def parse(cls, value: object, where: str) -> Expression:
        text = str(value).strip()
        if isinstance(value, bool) or not text:
            raise UnfoldError(f"{where}: expected a number or an expression, got {value!r}")
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as err:
            raise UnfoldError(f"{where}: cannot parse {text!r}: {err.msg}") from err
        for node in ast.walk(tree):
            allowed = (
                ast.Name,
                ast.Constant,
                ast.BinOp,
                ast.UnaryOp,
                ast.Compare,
                ast.BoolOp,
                ast.Load,
                ast.USub,
                ast.Not,
                ast.And,
                ast.Or,
                ast.Call,
                *_BINARY,
                *_COMPARE,
            )
            if not isinstance(node, allowed):
                raise UnfoldError(f"{where}: {type(node).__name__} is not allowed in {text!r}")
            if isinstance(node, ast.Call) and (
                not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords
            ):
                raise UnfoldError(f"{where}: Call is not allowed in {text!r}, except max(a, b) and min(a, b)")
            if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
                raise UnfoldError(f"{where}: only numeric constants are allowed in {text!r}")
        return cls(text=text, tree=tree)

    def names(self) -> set[str]:
        called = {id(n.func) for n in ast.walk(self.tree) if isinstance(n, ast.Call)}
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and id(n) not in called}

    def evaluate(self, values: Mapping[str, Number]) -> Number | bool:
        return _evaluate(self.tree, values, self.text)


def _evaluate(node: ast.expr, values: Mapping[str, Number], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise UnfoldError(f"{text!r}: the operation has no descriptor {node.id!r}")
        return values[node.id]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCTIONS[node.func.id](*(_evaluate(a, values, text) for a in node.args))
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, values, text), _evaluate(node.right, values, text))
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values, text)
        return -operand if isinstance(node.op, ast.USub) else not operand
    if isinstance(node, ast.BoolOp):
        results = [_evaluate(v, values, text) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values, text)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, values, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise UnfoldError(f"{text!r}: cannot evaluate {type(node).__name__}")


#: Which forward input a pass differentiates when its rule does not say (``input``).
DEFAULT_INPUT = {"backward_weights": 1, "backward_b": 1, "backward_c": 2}

#: What a declared pass derives: a problem to benchmark, nothing because it costs nothing (``cost: none``),
#: or nothing because no benchmark can pose it (``predicted: false``).
DERIVED, FREE, NOT_PREDICTED = "derived", "free", "not_predicted"


@dataclass(frozen=True)
class Rule:
    """One pass of an op_type: its name, condition, descriptor rewrites, new op_type, the forward input it
    differentiates, and whether it derives a problem (``kind``, with ``why`` when it does not)."""

    op_type: str
    pass_name: str
    when: Expression | None
    assignments: tuple[tuple[str, Expression], ...]
    derived_op_type: str
    input: int = 0
    kind: str = DERIVED
    why: str = ""

    def applies(self, values: Mapping[str, Number]) -> bool:
        return self.when is None or bool(self.when.evaluate(values))

    def derive(self, params: Sequence[tuple[str, Number]]) -> tuple[tuple[str, Number], ...]:
        """The forward parameters with the rewrites applied; every expression reads the forward values. A
        problem of another op_type that sets descriptors the forward operation lacks has that op_type's
        descriptors, each set by the rule or kept from the forward descriptor of the same name."""
        values = {d: v for d, v in params if d != "?"}
        new = {d: _number(expr.evaluate(values)) for d, expr in self.assignments}
        unknown = [d for d in new if d not in values]
        if unknown and self.derived_op_type != self.op_type and self.derived_op_type in DESCRIPTORS:
            descriptors = DESCRIPTORS[self.derived_op_type]
            missing = [d for d in descriptors if d not in new and d not in values]
            if missing:
                raise UnfoldError(
                    f"unfold rule {self.op_type}/{self.pass_name}: the {self.derived_op_type} problem needs "
                    f"{', '.join(missing)}; set them"
                )
            return tuple((d, new[d] if d in new else values[d]) for d in descriptors)
        if unknown:
            raise UnfoldError(
                f"unfold rule {self.op_type}/{self.pass_name}: sets {', '.join(unknown)}, which the "
                f"operation does not have (it has {', '.join(values)})"
            )
        return tuple((d, new[d] if d in new else v) for d, v in params)


def _number(value: Any) -> Number:
    """A rewritten descriptor value: comparisons give booleans, which the protocol writes as 0/1."""
    return int(value) if isinstance(value, bool) else value


@dataclass(frozen=True)
class UnfoldTable:
    """op_type -> rules, as read from the strategy table."""

    rules: Mapping[str, tuple[Rule, ...]]
    source: str = ""

    def rules_for(self, op_type: str) -> tuple[Rule, ...]:
        return self.rules.get(op_type, ())


def parse_table(data: Mapping[str, Any], source: str = "unfold table") -> UnfoldTable:
    """Validate a strategy table (``{"strategies": {op_type: [rule, ...]}}``) and parse its expressions."""
    if not isinstance(data, Mapping) or not isinstance(data.get("strategies"), Mapping):
        raise UnfoldError(f"{source}: expected a top-level 'strategies' map of op_type -> list of rules")
    rules: dict[str, tuple[Rule, ...]] = {}
    for op_type, entries in data["strategies"].items():
        if entries is None:
            entries = []
        if not isinstance(entries, Sequence) or isinstance(entries, str):
            raise UnfoldError(f"{source}: strategies.{op_type} must be a list of rules")
        if entries and op_type in NO_GRADIENT:
            raise UnfoldError(f"{source}: strategies.{op_type}: its output carries no gradient (NO_GRADIENT in "
                              "dlbench/core/glue.py), so it has no backward pass; remove its rules")  # fmt: skip
        parsed = []
        for i, entry in enumerate(entries):
            where = f"{source}: strategies.{op_type}[{i}]"
            if not isinstance(entry, Mapping):
                raise UnfoldError(f"{where}: a rule is a map with pass, set and optionally when/op_type")
            unknown = set(entry) - RULE_KEYS
            if unknown:
                raise UnfoldError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
            pass_name = str(entry.get("pass", "")).strip()
            if not pass_name:
                raise UnfoldError(f"{where}: 'pass' (the derived problem's name) is required")
            assignments = entry.get("set") or {}
            if not isinstance(assignments, Mapping):
                raise UnfoldError(f"{where}: 'set' must map descriptors to values or expressions")
            when = entry.get("when")
            parsed.append(
                Rule(
                    op_type=str(op_type),
                    pass_name=pass_name,
                    when=None if when is None else Expression.parse(when, f"{where}.when"),
                    assignments=tuple(
                        (str(d), Expression.parse(v, f"{where}.set.{d}")) for d, v in assignments.items()
                    ),
                    derived_op_type=str(entry.get("op_type") or op_type),
                    input=_input_index(entry, pass_name, where),
                    kind=_kind(entry, where),
                    why=str(entry.get("why") or "").strip(),
                )
            )
        rules[str(op_type)] = tuple(parsed)
    return UnfoldTable(rules=rules, source=source)


RULE_KEYS = {"pass", "when", "set", "op_type", "input", "cost", "predicted", "why"}


def _input_index(entry: Mapping[str, Any], pass_name: str, where: str) -> int:
    value = entry.get("input", DEFAULT_INPUT.get(pass_name, 0))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnfoldError(f"{where}: input={value!r}; the index (0, 1, ...) of the forward input it differentiates")
    return value


def _kind(entry: Mapping[str, Any], where: str) -> str:
    """``cost: none`` (a view or a gradient passed through) or ``predicted: false`` (no benchmark poses it):
    the pass derives no problem, and ``why`` must say why."""
    cost, predicted = entry.get("cost"), entry.get("predicted", True)
    if cost is not None and str(cost) != "none":
        raise UnfoldError(f"{where}: cost={cost!r}; the only value is none (a pass that costs nothing)")
    if not isinstance(predicted, bool):
        raise UnfoldError(f"{where}: predicted={predicted!r}; true or false")
    if cost is not None and not predicted:
        raise UnfoldError(f"{where}: a pass is either free (cost: none) or not predicted, not both")
    kind = FREE if cost is not None else (DERIVED if predicted else NOT_PREDICTED)
    if kind != DERIVED and (entry.get("set") or entry.get("op_type")):
        raise UnfoldError(f"{where}: a pass that derives no problem has no 'set' or 'op_type'")
    if kind != DERIVED and not str(entry.get("why") or "").strip():
        what = "costs nothing" if kind == FREE else "is not predicted"
        raise UnfoldError(f"{where}: say why the pass {what} ('why')")
    return kind


def load_table(source: str | Path | Mapping[str, Any] | None = None) -> UnfoldTable:
    """The strategy table from a YAML file, an already-loaded mapping (e.g. Hydra's ``cfg.unfold``), or
    the shipped ``conf/unfold/default.yaml`` when ``source`` is None."""
    data, origin = load_mapping(source, DEFAULT_TABLE, UnfoldError, "unfold strategy table")
    return parse_table(data, origin)


@dataclass(frozen=True)
class DeclaredPass:
    """A pass that runs in training but derives no problem: ``kind`` free (costs nothing) or not_predicted."""

    operation_id: int
    op_type: str
    pass_name: str
    kind: str
    why: str
    count: int
    nodes: tuple[str, ...]
    input: int = 0


@dataclass(frozen=True)
class Unfolding:
    """Forward operations followed by their derived ones (fresh ids after the last forward id).

    ``sources`` maps each derived operation's id to (forward operation id, pass name); derived operations
    keep the forward operation's ``nodes`` and ``count``, so every result still names its ONNX nodes. They
    have no ``input_shapes`` (the forward ones would mislead a permutation strategy). ``inputs``: which
    forward input each derived pass differentiates; ``declared``: the passes that derive no problem.
    """

    operations: tuple[Operation, ...]
    sources: Mapping[int, tuple[int, str]]
    inputs: Mapping[int, int] = field(default_factory=dict)
    declared: tuple[DeclaredPass, ...] = ()

    def pass_of(self, operation_id: int) -> str:
        return self.sources.get(operation_id, (operation_id, "forward"))[1]

    def input_of(self, operation_id: int) -> int:
        """The forward input the derived pass ``operation_id`` differentiates (0 for a forward one)."""
        return self.inputs.get(operation_id, DEFAULT_INPUT.get(self.pass_of(operation_id), 0))

    def declared_of(self, kind: str) -> tuple[DeclaredPass, ...]:
        return tuple(d for d in self.declared if d.kind == kind)


def unfold_operations(operations: Sequence[Operation], table: UnfoldTable) -> Unfolding:
    """Add the derived (backward) problems of every operation that the table has rules for."""
    next_id = max((op.id for op in operations), default=-1) + 1
    derived: list[Operation] = []
    sources: dict[int, tuple[int, str]] = {}
    inputs: dict[int, int] = {}
    declared: list[DeclaredPass] = []
    for op in operations:
        values = op.param_dict
        if not carries_gradient(op.op_type, values.get("to")):  # a Cast to an integer, a comparison
            continue
        for rule in table.rules_for(op.op_type):
            try:
                if not rule.applies(values):
                    continue
                params = rule.derive(op.params) if rule.kind == DERIVED else ()
            except (UnfoldError, ArithmeticError, TypeError) as err:
                raise UnfoldError(f"{table.source}: operation {op.id} ({op.label}): {err}") from err
            if rule.kind != DERIVED:
                declared.append(
                    DeclaredPass(op.id, op.op_type, rule.pass_name, rule.kind, rule.why, op.count, op.nodes, rule.input)
                )
                continue
            flops = moved = None
            if rule.derived_op_type in DESCRIPTORS:
                flops, moved = operation_cost(rule.derived_op_type, dict(params))
            derived.append(
                Operation(
                    id=next_id,
                    op_type=rule.derived_op_type,
                    params=params,
                    name=f"{op.name}:{rule.pass_name}" if op.name else "",  # the same layer, another pass
                    count=op.count,
                    nodes=op.nodes,
                    flops=flops,
                    bytes_moved=moved,
                )
            )
            sources[next_id] = (op.id, rule.pass_name)
            inputs[next_id] = rule.input
            next_id += 1
    return Unfolding(operations=(*operations, *derived), sources=sources, inputs=inputs, declared=tuple(declared))


def declared_notes(declared: Sequence[DeclaredPass]) -> list[str]:
    """One note per (op_type, pass, kind) of the declared passes: what costs nothing and what is not
    predicted, with why."""
    grouped: dict[tuple[str, str, str], list[DeclaredPass]] = {}
    for d in declared:
        grouped.setdefault((d.op_type, d.pass_name, d.kind), []).append(d)
    notes = []
    for (op_type, pass_name, kind), passes in grouped.items():
        nodes = sum(max(d.count, 0) for d in passes)
        what = "costs nothing" if kind == FREE else "NOT PREDICTED (no benchmark poses it)"
        notes.append(f"{op_type} {pass_name} of {nodes} node(s) {what}: {passes[0].why}")
    return notes
