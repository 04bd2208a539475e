"""The executable: ``python -m dlbench.backends.whole_model MODEL.onnx SAMPLES.csv ENGINE...`` runs the model
(every input dimension fixed) on each engine, checks the engines agree on the outputs, and times one forward
call per sample: interleaved in rounds of a shuffled engine order, each round a block of calls per engine
whose first call is not kept (the other engine ran just before it). Threads and repetition settings come
from the ``DLBENCH_*`` variables, as for the operator benchmarks. Writes ``engine,ms`` rows to SAMPLES.csv
and what was run to ``SAMPLES.json`` beside it."""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.backends.timing import TimingSettings
from dlbench.core.cores import resolve_threads
from dlbench.core.settings import from_environment
from dlbench.core.values import median_rel_ci

ENGINES = ("onnxruntime", "torch")
#: calls per engine and round; the first of each block warms the engine up again and is not kept
BLOCK = 3
_NUMPY = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def model_feeds(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input that is not a weight: normal floats; token ids below 50 and
    masks of ones for integer inputs (``mask`` in the name)."""
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value for d in tensor.shape.dim]
        if any(d.dim_value < 1 for d in tensor.shape.dim):
            raise ValueError(f"input {value.name!r} has an open dimension {shape}: fix every dimension first")
        dtype = _NUMPY.get(tensor.elem_type)
        if dtype is None:
            raise ValueError(f"input {value.name!r} has element type {tensor.elem_type}, not fed here")
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = np.ones(shape, dtype) if "mask" in value.name else rng.integers(0, 50, shape, dtype)
        elif dtype is np.bool_:
            feeds[value.name] = np.ones(shape, dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def onnxruntime_engine(model: Any, feeds: dict[str, np.ndarray], threads: int) -> tuple[Callable[[], Any], dict]:
    """One forward call of an InferenceSession with the operator benchmarks' session options (intra-op
    threads, sequential execution), inputs bound once; and what the session runs."""
    import onnxruntime as ort

    from dlbench.backends.onnxruntime.run import session_options

    session = ort.InferenceSession(model.SerializeToString(), session_options(ort, threads),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cpu", 0))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")

    def call() -> list[np.ndarray]:
        session.run_with_iobinding(binding)
        return [np.asarray(v.numpy()) for v in binding.get_outputs()]

    facts = {"onnxruntime_version": ort.__version__, "graph_optimization": "ORT_ENABLE_ALL (default)"}
    return (lambda: session.run_with_iobinding(binding)), {**facts, "outputs": call()}


def torch_engine(model: Any, feeds: dict[str, np.ndarray], threads: int) -> tuple[Callable[[], Any], dict]:
    """One forward of the model as a real eval-mode ``nn.Module`` (built by onnx2torch,
    :mod:`dlbench.backends.torch.graph`) under ``torch.inference_mode``."""
    import torch

    from dlbench.backends.torch.graph import torch_module

    torch.set_num_threads(resolve_threads(threads))
    module, nodes = torch_module(model)
    initializers = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializers and v.name in feeds]
    inputs = [torch.from_numpy(feeds[name]) for name in names]

    def call() -> Any:
        with torch.inference_mode():
            return module(*inputs)

    result = call()
    outputs = [t.numpy() for t in (result if isinstance(result, tuple | list) else (result,))]
    facts = {"torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
             "torch_module": "onnx2torch", "torch_nodes_per_call": nodes}  # fmt: skip
    return call, {**facts, "outputs": outputs}


def agreement(reference: list[np.ndarray], other: list[np.ndarray]) -> float:
    """Largest difference of the outputs relative to the reference's largest magnitude."""
    worst = 0.0
    for a, b in zip(reference, other, strict=True):
        if a.dtype.kind != "f":
            worst = max(worst, float(np.any(a != b)))
            continue
        scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-12)
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))) / scale if a.size else 0.0)
    return worst


def probe_model(op_type: str, nodes: int = 1) -> Any:
    """A chain of ``nodes`` one-node steps on a one-element tensor: what a node costs an engine besides its
    work."""
    from onnx import TensorProto, helper

    chain, previous = [], "x"
    for index in range(nodes):
        inputs = [previous] + (["shape"] if op_type == "Reshape" else [])
        chain.append(helper.make_node(op_type, inputs, [f"y{index}"]))
        previous = f"y{index}"
    initializers = [helper.make_tensor("shape", TensorProto.INT64, [2], [1, 1])] if op_type == "Reshape" else []
    graph = helper.make_graph(chain, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)],
                              initializers)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


#: layout nodes in the torch probe's longer chain; the per-node cost is the difference to one node over this
PROBE_NODES = 11


def per_node_ms(
    engine: Callable[..., Any], op_type: str, threads: int, settings: TimingSettings
) -> tuple[float, float]:
    """Median ms of one call of a one-node chain of ``op_type``, and what each further node adds (the
    difference to a chain of :data:`PROBE_NODES`, per node)."""
    from dlbench.backends.timing import time_repeated

    feeds = {"x": np.ones(1, np.float32)}
    one, _ = engine(probe_model(op_type), feeds, threads)
    many, _ = engine(probe_model(op_type, PROBE_NODES), feeds, threads)
    single = time_repeated(one, settings).stats.median_ms
    return single, max(time_repeated(many, settings).stats.median_ms - single, 0.0) / (PROBE_NODES - 1)


def overhead_probes(engines: list[str], threads: int, settings: TimingSettings) -> dict[str, float]:
    """What a node costs an engine besides its work, measured apart from the model on one-element chains:
    ``onnxruntime_run_ms`` (one session run of a one-node model, paid once by every operator benchmark of
    the onnxruntime backend and once per call by a whole model's session) and ``onnxruntime_node_ms`` (one
    more node in a session); ``torch_layout_node_ms``, one more layout-only node (a Reshape: a view) run by
    the torch graph, which the operator benchmarks do not time at all."""
    probes = {}
    if "onnxruntime" in engines:
        probes["onnxruntime_run_ms"], probes["onnxruntime_node_ms"] = per_node_ms(
            onnxruntime_engine, "Relu", threads, settings
        )
    if "torch" in engines:
        probes["torch_layout_node_ms"] = per_node_ms(torch_engine, "Reshape", threads, settings)[1]
    return probes


def time_interleaved(calls: dict[str, Callable[[], Any]], settings: TimingSettings) -> dict[str, list[float]]:
    """Samples in ms per engine: warm-up, then rounds until every engine has ``min_reps`` samples and
    ``min_time_s`` timed, and its median is known to ``target_rel_ci`` or ``max_time_s`` has passed (at most
    ``max_reps`` samples each)."""
    for call in calls.values():
        for _ in range(max(settings.warmup, 1)):
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    started = time.perf_counter()

    def done(values: list[float]) -> bool:
        if len(values) >= settings.max_reps:
            return True
        if len(values) < settings.min_reps or sum(values) < settings.min_time_s * 1e3:
            return False
        rel = median_rel_ci(values)
        return (rel is not None and rel <= settings.target_rel_ci) or time.perf_counter() - started >= (
            settings.max_time_s * len(calls)
        )

    while not all(done(values) for values in samples.values()):
        random.shuffle(order)
        for name in order:
            for index in range(BLOCK):
                start = time.perf_counter()
                calls[name]()
                elapsed = (time.perf_counter() - start) * 1e3
                if index:
                    samples[name].append(elapsed)
    return samples


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or any(engine not in ENGINES for engine in args[2:]):
        print(f"usage: python -m dlbench.backends.whole_model MODEL.onnx SAMPLES.csv {{{','.join(ENGINES)}}}...",
              file=sys.stderr)  # fmt: skip
        return 2
    import onnx

    model_path, samples_path, engines = Path(args[0]), Path(args[1]), list(dict.fromkeys(args[2:]))
    threads = int(from_environment(("threads",))["threads"])
    settings = TimingSettings.from_env()
    model = onnx.load(str(model_path))
    try:
        feeds = model_feeds(model)
    except ValueError as err:
        print(f"{model_path}: {err}", file=sys.stderr)
        return 2
    builders = {"onnxruntime": onnxruntime_engine, "torch": torch_engine}
    calls: dict[str, Callable[[], Any]] = {}
    facts: dict[str, Any] = {"threads": threads, "block": BLOCK, "engines": {}}
    outputs: dict[str, list[np.ndarray]] = {}
    for engine in engines:
        try:
            calls[engine], engine_facts = builders[engine](model, feeds, threads)
        except Exception as err:  # noqa: BLE001 - an engine that cannot run the model is reported, the rest go on
            text = " ".join((str(err).strip() or type(err).__name__).splitlines()[:3])
            print(f"{engine} cannot run {model_path.name}: {text}", file=sys.stderr, flush=True)
            facts["engines"][engine] = {"error": text}
            continue
        outputs[engine] = engine_facts.pop("outputs")
        facts["engines"][engine] = engine_facts
    if len(outputs) > 1:
        first, *rest = outputs
        facts["max_relative_difference"] = {f"{other}_vs_{first}": agreement(outputs[first], outputs[other])
                                            for other in rest}  # fmt: skip
    samples = time_interleaved(calls, settings) if calls else {}
    facts["probes"] = overhead_probes(list(calls), threads, settings)
    with samples_path.open("w", encoding="utf-8") as out:
        out.write("engine,ms\n")
        for engine, values in samples.items():
            out.writelines(f"{engine},{value!r}\n" for value in values)
    samples_path.with_suffix(".json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
    return 0 if calls else 1
