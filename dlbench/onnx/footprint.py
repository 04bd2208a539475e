"""The cache state a step's operations find their tensors in, from the step itself: the ONNX graph's nodes in
the order they run (forward, the loss, the backward pass in reverse, the optimizer over every parameter), each
reading and writing named tensors of known sizes (each at its own dtype: the graph's element type, or the
one the step ran where a caller says it). Replaying two steps through a least-recently-used stack gives,
for every tensor an operation reads, its reuse distance: the bytes of the distinct other tensors the step touched
since that tensor was last touched (short for the next layer's input, long for an activation saved in the
forward pass and read in the backward pass, about one step for a parameter). An operation's footprint is the
byte-weighted mean reuse distance of what it reads (an output is written where the allocator just freed a block,
which the caches still hold: a clean step's GELU ran in training as fast as from a hot cache, not 3x slower as
when its output counted as one step away). No fact of the machine enters: the benchmark caps it by the caches it reads
(:mod:`dlbench.backends.torch.rotation`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dlbench.core.dtypes import DTYPE_BYTES
from dlbench.core.values import Operation
from dlbench.onnx.update import COSTED_OPTIMIZERS

#: when no optimizer was recorded: SGD with momentum, one state tensor per parameter (``onnx/step.py`` assumes it)
ASSUMED_OPTIMIZER_STATES = 1
#: the steps replayed: the distances are read in the last, when every tensor has been touched before
REPLAYED_STEPS = 2


def optimizer_states(op: Operation) -> int:
    """State tensors ``op`` (an optimizer's update) keeps per parameter, as torch.optim keeps them: SGD a
    momentum buffer only with momentum; Adam and AdamW two moments, a third with amsgrad; RMSprop its square
    average, a momentum buffer with momentum and a gradient average when centered; 0 for anything else."""
    p = op.param_dict
    if op.op_type == "SGD":
        return int(float(p.get("momentum", 0)) != 0)
    if op.op_type in ("Adam", "AdamW"):
        return 2 + int(float(p.get("amsgrad", 0)) != 0)
    if op.op_type == "RMSprop":
        return 1 + int(float(p.get("momentum", 0)) != 0) + int(float(p.get("centered", 0)) != 0)
    return 0


RULE = (
    "per operation, the byte-weighted mean reuse distance of the tensors it reads (bytes of the other "
    "distinct tensors the step touched since each was last touched; "
    "forward in graph order, the loss, backward in reverse, the optimizer over every parameter, replayed for two "
    "steps); the benchmark rotates over 1 + that distance in whole rows (rounded to the nearest) copies of its "
    "tensors, so each call's inputs were last touched about that many bytes ago, capped at twice the last-level "
    "cache it reads from sysfs"
)


@dataclass(frozen=True)
class Event:
    """One kernel of the step: ``key`` (node, pass) and the tensors it reads, then writes."""

    key: tuple[str, str]
    reads: tuple[str, ...]
    writes: tuple[str, ...]


@dataclass(frozen=True)
class StepFootprint:
    """What the rule decided: the step's working set (bytes of every distinct tensor it touches), each event's
    and each operation's footprint (bytes), and how each operation was placed."""

    working_set_bytes: int
    events: Mapping[tuple[str, str], int]
    operations: Mapping[int, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: per event, the reuse distance of each tensor it touches
    distances: Mapping[tuple[str, str], Mapping[str, int]] = field(default_factory=dict)
    #: every tensor's bytes, each at its own dtype (the graph's element type, or the one the step ran)
    tensor_bytes: Mapping[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        sizes = sorted(self.operations.values())
        if not sizes:
            return f"cache state from the step: working set {_mib(self.working_set_bytes)}, no operations placed"
        median = sizes[len(sizes) // 2]
        return (
            f"cache state from the step: working set {_mib(self.working_set_bytes)}; footprint per operation "
            f"{_mib(sizes[0])} to {_mib(sizes[-1])} (median {_mib(median)}); rule: {RULE}"
        )

    def run_notes(self) -> list[str]:
        return [self.summary(), *self.notes]


def _mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def _numel(shape: Sequence[Any] | None) -> int:
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        return 1 if shape == () else 0
    return math.prod(shape)


def grad(name: str) -> str:
    return f"grad:{name}"


def graph_dtypes(
    nodes: Sequence[Any], node_inputs: Mapping[str, Sequence[str]], output_names: Mapping[str, Sequence[str]]
) -> dict[str, str]:
    """Each tensor's dtype as the graph says it: the element types of the extraction's node specs (an input's
    type is read from the graph; a spec's output type is a guess where inference left it open, so inputs win).
    A node without a spec (a layout node, one whose types could not all be carried) says nothing."""
    read: dict[str, str] = {}
    written: dict[str, str] = {}
    for node in nodes:
        spec = getattr(node, "node", None)
        if spec is None:
            continue
        for name, tensor in zip(node_inputs.get(node.name, ()), spec.inputs, strict=False):
            if name and tensor is not None:
                read.setdefault(name, tensor.dtype)
        for name, tensor in zip(output_names.get(node.name, ()), spec.outputs, strict=False):
            if name:
                written.setdefault(name, tensor.dtype)
    return {**written, **read}


def step_events(
    nodes: Sequence[Any],
    node_inputs: Mapping[str, Sequence[str]],
    output_names: Mapping[str, Sequence[str]],
    requires_grad: frozenset[str] | set[str],
    parameters: Sequence[str],
    tensor_dtypes: Mapping[str, str],
    default_bytes: int = 4,
    training: bool = True,
    optimizer_states: int = ASSUMED_OPTIMIZER_STATES,
) -> tuple[list[Event], dict[str, int]]:
    """The step's kernels in the order they run and every tensor's bytes, each at its dtype in
    ``tensor_dtypes`` (``default_bytes`` an element where it has none); a gradient and an optimizer state at their
    tensor's. ``nodes``: extracted ONNX node records (``name, kind, input_shapes, output_shapes``) in graph
    order; a layout node's output is a view of its first input (one tensor). ``training=False``: the forward
    pass only (a served model)."""
    sizes: dict[str, int] = {}
    alias: dict[str, str] = {}
    forward: list[Event] = []
    consumers: list[tuple[str, list[str], list[str]]] = []

    def size(tensor: str, shape: Any) -> int:
        dtype = tensor_dtypes.get(tensor, tensor_dtypes.get(alias.get(tensor, tensor), ""))
        return _numel(shape) * DTYPE_BYTES.get(dtype, default_bytes)

    for node in nodes:
        inputs, outputs = list(node_inputs.get(node.name, ())), list(output_names.get(node.name, ()))
        for tensor, shape in zip(inputs, node.input_shapes, strict=False):
            if tensor:
                sizes.setdefault(alias.get(tensor, tensor), size(tensor, shape))
        if node.kind == "layout" and inputs and inputs[0]:
            for out in outputs:
                alias[out] = alias.get(inputs[0], inputs[0])
            continue
        reads = [alias.get(t, t) for t in inputs if t]
        writes = [alias.get(t, t) for t in outputs if t]
        for tensor, shape in zip(outputs, node.output_shapes, strict=False):
            if tensor:
                sizes[alias.get(tensor, tensor)] = size(tensor, shape)
        forward.append(Event((node.name, "forward"), tuple(reads), tuple(writes)))
        consumers.append((node.name, inputs, outputs))
    if not training:
        return forward, sizes
    events = list(forward) + _backward_events(forward, consumers, alias, requires_grad)
    for parameter in parameters:
        states = tuple(f"state{k}:{parameter}" for k in range(optimizer_states))
        events.append(Event((parameter, "optimizer"), (parameter, grad(parameter), *states), (parameter, *states)))
    for tensor in list(sizes):
        sizes[grad(tensor)] = sizes[tensor]
    for parameter in parameters:
        for k in range(optimizer_states):
            sizes[f"state{k}:{parameter}"] = sizes.get(parameter, 0)
    return events, sizes


def _backward_events(
    forward: Sequence[Event], consumers: Sequence[tuple[str, list[str], list[str]]], alias: Mapping[str, str],
    requires_grad: frozenset[str] | set[str],
) -> list[Event]:  # fmt: skip
    """The loss on the outputs no node reads, then each node's gradient per input that needs one, in reverse."""
    produced = {t for e in forward for t in e.writes}
    consumed = {t for e in forward for t in e.reads}
    logits = tuple(sorted(produced - consumed))
    events = [Event(("loss", "loss"), logits, tuple(grad(t) for t in logits))]
    for name, inputs, outputs in reversed(consumers):
        grads_out = tuple(grad(alias.get(t, t)) for t in outputs if t)
        present = [(i, alias.get(t, t)) for i, t in enumerate(inputs) if t]
        for index, tensor in present:
            if inputs[index] not in requires_grad and tensor not in requires_grad:
                continue
            others = tuple(t for i, t in present if i != index) if len(present) > 1 else (tensor,)
            events.append(Event((name, str(index)), grads_out + others, (grad(tensor),)))
    return events


def reuse_distances(events: Sequence[Event], sizes: Mapping[str, int]) -> dict[tuple[str, str], dict[str, int]]:
    """Per event of the last of :data:`REPLAYED_STEPS` replayed steps, each tensor it reads and its reuse
    distance in bytes. Every tensor was touched in the step before (the batch, too: a steady step's batch
    lands where the last one was). A tensor written is taken to land in the memory it had one step before (a
    steady step allocates the same blocks in the same order), so its distance counts from its last touch
    then, as a read's does."""
    touches = _Touches(REPLAYED_STEPS * sum(len(e.reads) + len(e.writes) for e in events))
    distances: dict[tuple[str, str], dict[str, int]] = {}
    for step in range(REPLAYED_STEPS):
        for event in events:
            if step == REPLAYED_STEPS - 1:
                distances[event.key] = {tensor: touches.since(tensor) for tensor in dict.fromkeys(event.reads)}
            for tensor in event.reads + event.writes:
                touches.touch(tensor, sizes.get(tensor, 0))
    return distances


class _Touches:
    """A least-recently-used stack of tensors as a Fenwick tree over touch times: each tensor's bytes sit at
    the time of its last touch, so the bytes touched since a tensor's last touch are a suffix sum (log time,
    where scanning the stack would take the stack's length for every read of a large graph)."""

    def __init__(self, capacity: int) -> None:
        self.tree = [0] * (capacity + 1)
        self.last: dict[str, tuple[int, int]] = {}  # tensor -> (time of its last touch, its bytes)
        self.now = 0
        self.total = 0

    def _add(self, index: int, value: int) -> None:
        while index < len(self.tree):
            self.tree[index] += value
            index += index & -index

    def _prefix(self, index: int) -> int:
        out = 0
        while index > 0:
            out += self.tree[index]
            index -= index & -index
        return out

    def since(self, tensor: str) -> int:
        """Bytes of the other tensors touched since ``tensor`` was last touched."""
        at, _ = self.last[tensor]
        return self.total - self._prefix(at)

    def touch(self, tensor: str, size: int) -> None:
        if tensor in self.last:
            at, old = self.last[tensor]
            self._add(at, -old)
            self.total -= old
        self.now += 1
        self._add(self.now, size)
        self.total += size
        self.last[tensor] = (self.now, size)


def event_footprints(
    distances: Mapping[tuple[str, str], Mapping[str, int]], sizes: Mapping[str, int]
) -> dict[tuple[str, str], int]:
    """Each event's byte-weighted mean reuse distance over what it reads."""
    out = {}
    for key, seen in distances.items():
        weight = sum(sizes.get(t, 0) for t in seen)
        out[key] = round(sum(sizes.get(t, 0) * d for t, d in seen.items()) / weight) if weight else 0
    return out


def operation_footprints(
    operations: Sequence[Operation],
    passes: Mapping[int, str],
    input_of: Mapping[int, int],
    events: Mapping[tuple[str, str], int],
    sizes: Mapping[str, int],
    working_set: int,
) -> tuple[dict[int, int], list[str]]:
    """Each operation's footprint: the mean over its nodes' events of the pass it is (forward; the backward
    pass differentiating input ``input_of``; the loss; the optimizer's, weighted by parameter bytes). An
    operation none of whose nodes ran as an event of the graph gets the step's working set (noted)."""
    out: dict[int, int] = {}
    unplaced: list[str] = []
    optimizer = [(sizes.get(k[0], 0), v) for k, v in events.items() if k[1] == "optimizer"]
    optimizer_bytes = sum(b for b, _ in optimizer)
    for op in operations:
        pass_name = passes.get(op.id, "forward")
        named = [(n.split(":", 1)[1], "optimizer") for n in op.nodes if n.startswith("optimizer:")]
        if pass_name == "optimizer" and any(key in events for key in named):  # one update per parameter
            found = [events[key] for key in named if key in events]
        elif pass_name == "optimizer":  # a group's update over all its parameters at once
            found = [sum(b * v for b, v in optimizer) / optimizer_bytes] if optimizer_bytes else []
        elif pass_name.startswith("loss"):
            found = [events[("loss", "loss")]] if ("loss", "loss") in events else []
        elif pass_name == "forward":
            found = [events[(n, "forward")] for n in op.nodes if (n, "forward") in events]
        else:
            index = str(input_of.get(op.id, 0))
            found = [events[(n, index)] for n in op.nodes if (n, index) in events]
            if not found:  # the input the table names is not one the graph differentiates: the node's others
                found = [v for n in op.nodes for k, v in events.items() if k[0] == n and k[1].isdigit()]
        if found:
            out[op.id] = round(sum(found) / len(found))
        else:
            out[op.id] = working_set
            unplaced.append(op.label)
    notes = []
    if unplaced:
        shown = ", ".join(sorted(set(unplaced))[:8])
        notes.append(f"cache state from the step: {len(unplaced)} operation(s) with no node of the graph ({shown}) "
                     "rotate over the step's whole working set")  # fmt: skip
    return out, notes


def step_footprint(
    operations: Sequence[Operation],
    passes: Mapping[int, str],
    input_of: Mapping[int, int],
    nodes: Sequence[Any],
    facts: Any,
    default_bytes: int = 4,
    training: bool = True,
    tensor_dtypes: Mapping[str, str] | None = None,
) -> StepFootprint:
    """The rule end to end for a step's ``operations`` (``facts``: :class:`dlbench.onnx.step.GraphFacts`;
    ``nodes``: the extraction's node records). Each tensor is sized at its dtype: the one the step ran
    (``tensor_dtypes``, tensor name -> dtype, e.g. what autocast ran), else the graph's element type, else
    ``default_bytes`` an element."""
    output_names: dict[str, list[str]] = {}
    for tensor, (node, position) in facts.output_producers.items():
        names = output_names.setdefault(node, [])
        names.extend([""] * (position + 1 - len(names)))
        names[position] = tensor
    optimizers = [op for op in operations if passes.get(op.id) == "optimizer" and op.op_type in COSTED_OPTIMIZERS]
    states = max(map(optimizer_states, optimizers)) if optimizers else ASSUMED_OPTIMIZER_STATES
    ordered = sorted(nodes, key=lambda n: n.index)
    dtypes = {**graph_dtypes(ordered, facts.node_inputs, output_names), **(tensor_dtypes or {})}
    events, sizes = step_events(
        ordered, facts.node_inputs, output_names, facts.requires_grad, [name for name, _ in facts.parameters],
        dtypes, default_bytes, training, states,
    )  # fmt: skip
    touched = {t for e in events for t in e.reads + e.writes}
    working_set = sum(sizes.get(t, 0) for t in touched)
    distances = reuse_distances(events, sizes)
    per_event = event_footprints(distances, sizes)
    per_op, notes = operation_footprints(operations, passes, input_of, per_event, sizes, working_set)
    return StepFootprint(working_set, per_event, per_op, tuple(notes), distances, sizes)


def placed_step(
    step: Any, unfolding: Any, nodes: Sequence[Any], facts: Any, default_bytes: int = 4,
    tensor_dtypes: Mapping[str, str] | None = None,
):  # fmt: skip
    """``step`` (:class:`dlbench.onnx.step.TrainingStep`) with each operation's ``footprint_bytes`` set by the
    rule, and the :class:`StepFootprint` that decided them (``unfolding``: the step's
    :class:`dlbench.onnx.unfold.Unfolding`, which says the input each backward pass differentiates).
    ``default_bytes``: the element size of a tensor whose dtype neither ``tensor_dtypes`` (tensor name ->
    dtype the step ran) nor the graph says."""
    input_of = {op.id: unfolding.input_of(op.id) for op in step.operations}
    decided = step_footprint(
        step.operations, step.passes, input_of, nodes, facts, default_bytes, tensor_dtypes=tensor_dtypes,
    )  # fmt: skip
    operations = tuple(replace(op, footprint_bytes=decided.operations.get(op.id)) for op in step.operations)
    return replace(step, operations=operations), decided


def placed_forward(
    operations: Sequence[Operation], nodes: Sequence[Any], facts: Any, tensor_dtypes: Mapping[str, str] | None = None
):
    """A served model's ``operations`` with each one's ``footprint_bytes`` from its forward pass alone (the
    weights read one forward apart, each activation right after it was written), and the decision; each
    tensor at its graph's element type, or the dtype it ran (``tensor_dtypes``)."""
    decided = step_footprint(operations, {}, {}, nodes, facts, training=False, tensor_dtypes=tensor_dtypes)
    return [replace(op, footprint_bytes=decided.operations.get(op.id)) for op in operations], decided
