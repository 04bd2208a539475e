"""The executable: read the ids, each operation's node from ``<stem>_nodes.json``, build and time a one-node
onnxruntime session per operation, write ``<stem>_out.csv``. A node onnxruntime cannot run (an unknown
operator or domain, an unsupported opset or type) fails its own row with onnxruntime's message."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dlbench.backends.onnxruntime.canonical import batchnorm_for_mode, canonical_node, forward_mode
from dlbench.backends.onnxruntime.model import OneNodeModel, UnrunnableNode, build_model, with_float_type
from dlbench.backends.timing import TimingSettings, time_repeated
from dlbench.core.cores import resolve_threads
from dlbench.core.dtypes import DTYPES
from dlbench.core.glue import InvalidParameters
from dlbench.core.machine import available_memory_bytes
from dlbench.core.settings import from_environment
from dlbench.operators.node_file import NodeEntry, nodes_path_for, read_nodes
from dlbench.operators.protocol import output_path_for, read_input


class RowFailed(Exception):
    """This operation cannot be measured here (the message says why); the other rows go on."""


def _first_lines(err: BaseException, lines: int = 3) -> str:
    text = str(err).strip() or type(err).__name__
    return " ".join(text.splitlines()[:lines])


def providers_for(device: str, available: list[str]) -> list[str]:
    if device == "cuda":
        if "CUDAExecutionProvider" not in available:
            raise SystemExit(
                "dlbench onnxruntime: DLBENCH_DEVICE=cuda but this onnxruntime has no CUDAExecutionProvider "
                f"(it has {', '.join(available)}); install onnxruntime-gpu"
            )
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def session_options(ort: Any, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = resolve_threads(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors reach us as exceptions; warnings would flood stderr
    return options


def prepared(entry: NodeEntry, dtype: str) -> OneNodeModel:
    if entry.problem:
        raise RowFailed(entry.problem)
    mode = int(entry.param_dict.get("mode", 0))
    if entry.node is not None:
        if not forward_mode(entry.op_type, mode):
            raise RowFailed(f"mode={mode}: onnxruntime runs the forward pass (inference) only")
        spec = entry.node
        if entry.op_type == "BatchNormalization" and not spec.domain:  # training or inference, as described
            spec = batchnorm_for_mode(spec, mode)
    else:
        try:
            spec = canonical_node(entry.op_type, entry.param_dict)
        except (InvalidParameters, KeyError) as err:
            raise RowFailed(f"no ONNX node for {entry.op_type}: {err}") from err
    try:
        return build_model(with_float_type(spec, dtype))
    except (UnrunnableNode, ValueError, TypeError) as err:
        raise RowFailed(f"cannot build the node: {_first_lines(err)}") from err


def timed_session(ort: Any, model: OneNodeModel, options: Any, providers: list[str]) -> Any:
    """A callable that runs the session once on bound inputs (outputs allocated by onnxruntime per run)."""
    try:
        session = ort.InferenceSession(model.model, options, providers=providers)
        binding = session.io_binding()
        device = "cuda" if providers[0] == "CUDAExecutionProvider" else "cpu"
        for name, array in model.feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, device, 0))
        for output in session.get_outputs():
            binding.bind_output(output.name, device)
        session.run_with_iobinding(binding)  # the first run fails here, not inside the timing loop
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
        raise RowFailed(f"onnxruntime {ort.__version__} cannot run it: {_first_lines(err)}") from err
    return lambda: session.run_with_iobinding(binding)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m dlbench.backends.onnxruntime INPUT.csv  (with INPUT_nodes.json beside it)",
            file=sys.stderr,
        )
        return 2
    input_path = Path(args[0])
    try:
        run = from_environment(("threads", "dtype", "device", "memory_fraction", "caches"))
        rows = read_input(input_path)
        nodes = read_nodes(nodes_path_for(input_path))
    except (OSError, ValueError) as err:
        print(f"cannot read {input_path} and its node file: {err}", file=sys.stderr)
        return 2
    dtype = str(run["dtype"])
    if dtype not in DTYPES:
        print(f"DLBENCH_DTYPE={dtype!r}: use one of {', '.join(DTYPES)}", file=sys.stderr)
        return 2
    if run["caches"] != "hot":
        print(
            f"DLBENCH_CACHES={run['caches']!r}: the onnxruntime kernels time with hot caches only; measure with "
            "caches=hot (measure.caches, evaluate.caches) or with the torch backend",
            file=sys.stderr,
        )
        return 2
    import onnxruntime as ort

    providers = providers_for(str(run["device"]).replace("auto", "cpu"), ort.get_available_providers())
    options = session_options(ort, int(run["threads"]))
    settings = TimingSettings.from_env()
    failed = 0
    with output_path_for(input_path).open("w", encoding="utf-8") as out:
        out.write("id,ms,min,max,mean,std,iqr,reps\n")
        out.flush()
        for op_id, _ in rows:
            entry = nodes.get(op_id)
            try:
                if entry is None:
                    raise RowFailed(f"no entry in {nodes_path_for(input_path).name}")
                model = prepared(entry, dtype)
                if model.tensor_bytes * 3 > float(run["memory_fraction"]) * available_memory_bytes():
                    raise RowFailed(f"needs about {3 * model.tensor_bytes / 2**30:.1f} GiB, over the free memory")
                fn = timed_session(ort, model, options, providers)
                timing = time_repeated(fn, settings)
                del fn
            except RowFailed as err:
                failed += 1
                op_type = entry.op_type if entry is not None else "operation"
                print(f"id {op_id}: {op_type} unsupported: {err}", file=sys.stderr, flush=True)
                continue
            s = timing.stats
            out.write(
                f"{op_id},{s.median_ms!r},{s.min_ms!r},{s.max_ms!r},{s.mean_ms!r},{s.std_ms!r},{s.iqr_ms!r},{s.reps}\n"
            )
            out.flush()
    return 1 if failed and failed == len(rows) else 0
