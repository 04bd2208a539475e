"""A profiled step's raw events, one plain record each, read from a live ``torch.profiler.profile`` (kineto's
results) or from the Chrome trace it exported (``batch_<i>_trace.json``): operators and runtime calls on
the host threads, kernels, memcpys and memsets on the device streams, and the correlation that links each
device activity to the runtime call that launched it and to the operator that made the call.

Both readers give the same records, so what is built on them (the operator table, the two-lane breakdown,
the replay of a recorded step) is tested offline on recorded CUDA traces.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Runtime calls after which the host has waited for the device (the lanes join there).
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
    }
)
#: ``cudaMemcpyAsync`` device -> host into pageable memory is synchronous too (``loss.item()``, ``.cpu()``).
SYNC_COPIES = ("DtoH", "Device -> Pageable", "Device -> Pinned")

#: Kinds of :class:`TraceEvent`.
OPERATOR, RUNTIME, DEVICE = "operator", "runtime", "device"


@dataclass
class TraceEvent:
    """One event, times in ns. ``correlation``: an operator's own id; a runtime call's and a device
    activity's id of their launch (the same for a call and what it launched); ``op``: the id of the
    operator a runtime call or device activity belongs to (0: none)."""

    kind: str
    name: str
    start: int
    end: int
    thread: int
    correlation: int = 0
    op: int = 0
    shapes: Any = ()
    stream: int = 0
    #: the profiler's type of each input (``float``, ``c10::BFloat16``, ``Scalar``) and each input's strides
    types: Any = ()
    strides: Any = ()

    @property
    def duration(self) -> int:
        return self.end - self.start


def is_sync(call: TraceEvent, launched: list[TraceEvent]) -> bool:
    """A runtime call the host waits in: a synchronisation, or a copy to the host (``launched``: what the
    call put on a stream)."""
    if call.name in SYNC_CALLS:
        return True
    return call.name.startswith(("cudaMemcpy", "cuMemcpy")) and any(
        any(tag in d.name for tag in SYNC_COPIES) for d in launched
    )


_FILTERED = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


def kineto_events(profiler: Any) -> list[TraceEvent]:
    """The records of a stopped ``torch.profiler.profile`` (kineto's raw events, without building
    ``key_averages``' Python objects: ~0.2 s per ResNet step)."""
    from torch.autograd import DeviceType

    out: list[TraceEvent] = []
    for raw in profiler.profiler.kineto_results.events():
        name = raw.name()
        if name in _FILTERED or raw.is_hidden_event():
            continue
        start = raw.start_ns()
        end = start + raw.duration_ns()
        if raw.device_type() != DeviceType.CPU:
            stream = _int(getattr(raw, "device_resource_id", lambda: 0)())
            out.append(TraceEvent(DEVICE, name, start, end, 0, _int(raw.correlation_id()), raw.linked_correlation_id(),
                                  (), stream))  # fmt: skip
        elif raw.is_async() or raw.start_thread_id() != raw.end_thread_id():
            continue  # nesting is undefined across threads; torch leaves async events out of self times too
        elif raw.linked_correlation_id() > 0:  # a runtime call, linked to the operator that made it
            out.append(TraceEvent(RUNTIME, name, start, end, raw.start_thread_id(), _int(raw.correlation_id()),
                                  raw.linked_correlation_id()))  # fmt: skip
        else:
            name = "ProfilerStep*" if name.startswith("ProfilerStep#") else name
            out.append(TraceEvent(OPERATOR, name, start, end, raw.start_thread_id(), raw.correlation_id(), 0,
                                  raw.shapes(), 0, raw.dtypes(), _strides(raw)))  # fmt: skip
    _correlate_launches(out)
    return out


def _correlate_launches(events: list[TraceEvent]) -> None:
    """Where kineto's live results give no launch correlation (older versions link device activities to
    operators only), pair each activity with the runtime call of the same operator that launched it (the
    k-th activity of an operator with its k-th launching call)."""
    if all(e.correlation for e in events if e.kind != OPERATOR):
        return
    calls: dict[int, list[TraceEvent]] = {}
    for e in sorted(events, key=lambda e: e.start):
        if e.kind == RUNTIME and e.op and _launches(e.name):
            calls.setdefault(e.op, []).append(e)
    taken: dict[int, int] = {}
    for i, d in enumerate(sorted((e for e in events if e.kind == DEVICE), key=lambda e: e.start)):
        queue = calls.get(d.op, [])
        k = taken.get(d.op, 0)
        if k < len(queue):
            d.correlation = queue[k].correlation = queue[k].correlation or -(i + 1)
            taken[d.op] = k + 1


def _launches(name: str) -> bool:
    return "Launch" in name or "Memcpy" in name or "Memset" in name


_DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


def read_trace(path: str | Path) -> list[TraceEvent]:
    """The records of an exported Chrome trace; a file that is not one raises ``ValueError`` naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable Chrome trace ({err})") from None
    raw = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise ValueError(f"{path}: no 'traceEvents' list; expected a trace exported by torch.profiler")
    out: list[TraceEvent] = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        category, name, args = e.get("cat"), str(e.get("name", "")), e.get("args") or {}
        try:
            start = round(float(e["ts"]) * 1e3)
            end = start + round(float(e.get("dur", 0)) * 1e3)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: traceEvents[{i}] ({name[:60]!r}) has no numeric ts/dur") from None
        external = _int(args.get("External id"))
        if category in _DEVICE_CATEGORIES:
            out.append(TraceEvent(DEVICE, name, start, end, 0, _int(args.get("correlation")), external, (),
                                  _int(args.get("stream"))))  # fmt: skip
        elif category in _RUNTIME_CATEGORIES:
            out.append(TraceEvent(RUNTIME, name, start, end, _int(e.get("tid")), _int(args.get("correlation")),
                                  external))  # fmt: skip
        elif category in ("cpu_op", "user_annotation") and name not in _FILTERED:
            name = "ProfilerStep*" if name.startswith("ProfilerStep#") else name
            out.append(TraceEvent(OPERATOR, name, start, end, _int(e.get("tid")), external, 0,
                                  args.get("Input Dims", []), 0, args.get("Input type", []),
                                  args.get("Input Strides", [])))  # fmt: skip
    return out


def _strides(raw: Any) -> Any:
    """A kineto event's input strides (torch >= 2.1 records them with the shapes; () where it does not)."""
    reader = getattr(raw, "structured_input_strides", None)
    try:
        return reader() if reader is not None else ()
    except RuntimeError:
        return ()


#: The profiler's names of tensor element types -> dlbench's (``core/dtypes.py``); anything else is no tensor.
PROFILER_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8", "unsigned char": "uint8",
    "bool": "bool", "unsigned short": "uint16", "unsigned int": "uint32", "unsigned long": "uint64",
}  # fmt: skip

CONTIGUOUS, CHANNELS_LAST = "contiguous", "channels_last"
#: a matrix (rank 2 or 3) whose last two dimensions are laid out column-major: a transposed view (``w.t()``)
TRANSPOSED = "transposed"


def input_dtypes(types: Any) -> list[str]:
    """Each input's dtype in dlbench's names, ``""`` for an input that is no tensor (a scalar, a list)."""
    return [PROFILER_DTYPES.get(str(t), "") for t in types or ()]


def memory_format(shapes: Any, strides: Any) -> str:
    """``channels_last`` when an input of rank 4 or 5 is laid out channels-last (and not also contiguous, as a
    tensor with one channel or one pixel is), else ``contiguous``. Dimensions of size 1 do not count, as in
    ``Tensor.is_contiguous(memory_format=...)``."""
    return CHANNELS_LAST if CHANNELS_LAST in input_formats(shapes, strides) else CONTIGUOUS


def input_formats(shapes: Any, strides: Any) -> list[str]:
    """Each input's memory format: ``channels_last`` or ``contiguous`` for a tensor of rank 4 or 5 laid out
    densely so (one that is both, as a tensor with one channel is, reads ``contiguous``); ``transposed`` for a
    matrix of rank 2 or 3 whose last two dimensions are column-major and not also row-major (a GEMM's operand
    transposed); ``""`` for anything else (another rank or layout, a strided view, no tensor). A copy between
    two image formats is a layout conversion."""
    out = []
    for i, shape in enumerate(shapes or ()):
        stride = (strides or ())[i] if i < len(strides or ()) else None
        if not isinstance(shape, list | tuple) or len(stride or ()) != len(shape):
            out.append("")
        elif len(shape) in (2, 3):
            out.append(TRANSPOSED if _transposed(shape, stride) else "")
        elif len(shape) not in (4, 5):
            out.append("")
        elif _dense(shape, stride, list(range(len(shape)))):
            out.append(CONTIGUOUS)
        elif _dense(shape, stride, [0, *range(2, len(shape)), 1]):  # N, spatial..., C: outermost first
            out.append(CHANNELS_LAST)
        else:
            out.append("")
    return out


def _transposed(shape: Any, stride: Any) -> bool:
    """Whether a matrix's last two dimensions are dense column-major and not also row-major."""
    last = [len(shape) - 2, len(shape) - 1]
    rows, columns = [int(shape[d]) for d in last]
    column_major = (rows == 1 or int(stride[last[0]]) == 1) and (columns == 1 or int(stride[last[1]]) == rows)
    return column_major and not _dense([rows, columns], [int(stride[d]) for d in last], [0, 1])


def _dense(shape: Any, stride: Any, order: list[int]) -> bool:
    """Whether ``stride`` lays ``shape`` out densely with ``order``'s last dimension innermost."""
    expected = 1
    for dim in reversed(order):
        size = int(shape[dim])
        if size != 1 and int(stride[dim]) != expected:
            return False
        expected *= size
    return True


def _int(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) else 0
