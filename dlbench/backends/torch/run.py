"""The executable: read the input rows, build each operator's tensors, time it, write ``<stem>_out.csv``."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch

from dlbench.backends.timing import Timing, TimingSettings, clock_for, time_repeated
from dlbench.backends.torch.fp32_math import apply_fp32_math
from dlbench.backends.torch.kernels import DTYPES, KERNELS
from dlbench.backends.torch.memory import free_memory, memory_problem, tensor_bytes
from dlbench.backends.torch.params import MEMORY_FORMATS, UnsupportedRow, laid_out_as
from dlbench.backends.torch.rotation import cold_footprint, fault_in, rotated, row_copies, touched_bytes
from dlbench.core.allocator import release_free_heap
from dlbench.core.cores import resolve_threads
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.settings import CACHE_STATES, ROW_SETTINGS, from_environment, row_value
from dlbench.operators.footprint_file import (
    ROTATION_HEADER,
    footprints_path_for,
    read_footprints,
    rotation_line,
    rotation_path_for,
)
from dlbench.operators.protocol import (
    SAMPLES_HEADER,
    output_header,
    output_path_for,
    output_row,
    read_input,
    samples_path_for,
    samples_rows,
)


def _memory_fraction_from_env() -> float:
    try:
        value = float(from_environment(("memory_fraction",))["memory_fraction"])
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise SystemExit(
            f"DLBENCH_MEMORY_FRACTION={os.environ.get('DLBENCH_MEMORY_FRACTION')!r}: use a fraction in (0, 1]"
        )
    return value


def _device_from_env() -> torch.device:
    name = str(from_environment(("device",))["device"])
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("dlbench torch kernels: DLBENCH_DEVICE=cuda but torch sees no CUDA device")
    return torch.device(name)


def _configure() -> tuple[torch.dtype, str, str] | None:
    """Threads and float32 math set from the environment; its dtype, cache state and memory format, or None
    after saying what is wrong."""
    try:
        run = from_environment(("threads", "dtype", "caches", "fp32_math", "memory_format"))
        apply_fp32_math(str(run["fp32_math"]))
    except ValueError as err:
        print(err, file=sys.stderr)
        return None
    torch.set_num_threads(resolve_threads(int(run["threads"])))
    dtype_name = str(run["dtype"])
    if dtype_name not in DTYPES:
        print(f"DLBENCH_DTYPE={dtype_name!r}: use one of {', '.join(DTYPES)}", file=sys.stderr)
        return None
    if run["caches"] not in CACHE_STATES:
        print(f"DLBENCH_CACHES={run['caches']!r}: use one of {', '.join(CACHE_STATES)}", file=sys.stderr)
        return None
    if run["memory_format"] not in MEMORY_FORMATS:
        print(
            f"DLBENCH_MEMORY_FORMAT={run['memory_format']!r}: use one of {', '.join(MEMORY_FORMATS)}", file=sys.stderr
        )
        return None
    return DTYPES[dtype_name], str(run["caches"]), str(run["memory_format"])


def _rotation(
    op_type: str,
    params: dict[str, float],
    device: torch.device,
    dtype: torch.dtype,
    cache_state: tuple[str, int, int | None],
    memory_fraction: float,
) -> tuple[Callable[[], object], int, int] | str:
    """A row's timed callable, rotating over its copies, with the bytes one copy holds and the copies; or why
    the memory free cannot hold them. ``cache_state``: the run's caches, their cap and the operation's reuse
    distance in its step. A rotated row is sized by what one copy holds (:func:`touched_bytes`; the kernel's
    upper estimate where the allocator cannot tell), a hot one by the estimate."""
    caches, cap, step_bytes = cache_state
    build = partial(KERNELS[op_type], params, device, dtype)
    row_bytes = tensor_bytes(op_type, params, torch.empty((), dtype=dtype).element_size())
    if caches != "hot":
        skip = memory_problem(row_bytes, free_memory(device), memory_fraction)
        if skip:
            return skip
        row_bytes = touched_bytes(build, device) or row_bytes
    copies = row_copies(caches, cap, row_bytes, step_bytes)
    skip = memory_problem(row_bytes * copies, free_memory(device), memory_fraction)
    return skip or (rotated(build, copies), row_bytes, copies)


def _after_fault_in(fn, copies: int, settings: TimingSettings, device: torch.device) -> TimingSettings:
    """``settings`` for timing ``fn`` after its warm-up calls, which on a CPU go on until its calls stopped
    faulting (:func:`fault_in`)."""
    if device.type != "cpu":
        return settings
    fault_in(fn, copies, settings.warmup)
    return replace(settings, warmup=0)


@dataclass(frozen=True)
class _Run:
    """What every row of one invocation shares: the operator, where and how it is timed, the defaults."""

    op_type: str
    device: torch.device
    dtype: torch.dtype
    memory_format: str
    caches: str
    cap: int
    memory_fraction: float
    settings: TimingSettings
    clock: object
    step_footprints: dict[int, int]

    def row(self, values: list[float]) -> tuple[dict[str, float], torch.dtype, str]:
        """A row's parameters, dtype and memory format: its own where it carries them after the parameters
        (``core/settings.py`` ``ROW_SETTINGS``), else the invocation's."""
        descriptors = DESCRIPTORS[self.op_type]
        extra = len(values) - len(descriptors)
        if extra not in (0, len(ROW_SETTINGS)):
            raise UnsupportedRow(
                f"{len(values)} parameters, {self.op_type} takes {len(descriptors)}: {', '.join(descriptors)} "
                f"(then optionally {', '.join(ROW_SETTINGS)})"
            )
        params = dict(zip(descriptors, values[: len(descriptors)], strict=True))
        if not extra:
            return params, self.dtype, self.memory_format
        try:
            codes = zip(ROW_SETTINGS, values[len(descriptors) :], strict=True)
            named = {key: row_value(key, code) for key, code in codes}
        except ValueError as err:
            raise UnsupportedRow(str(err)) from err
        return params, DTYPES[named["dtype"]], named["memory_format"]

    def time(self, op_id: int, values: list[float]) -> tuple[Timing, str] | str:
        """One row timed, with its rotation line; or why it was not (a row in a dtype or memory format this
        device cannot run says "unable: bfloat16")."""
        dtype, layout = self.dtype, self.memory_format
        try:
            params, dtype, layout = self.row(values)
            release_free_heap()  # every row starts from the same heap, whatever the rows before it freed
            cache_state = (self.caches, self.cap, self.step_footprints.get(op_id))
            with laid_out_as(layout):
                row = _rotation(self.op_type, params, self.device, dtype, cache_state, self.memory_fraction)
            if isinstance(row, str):
                return row
            fn, row_bytes, copies = row
            line = rotation_line(op_id, row_bytes, copies, self.cap)
            settings = _after_fault_in(fn, copies, self.settings, self.device)
            timing = time_repeated(fn, settings, clock=self.clock)
            del fn  # free this row's tensors before the next row is sized
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # else the caching allocator's hold shows as used memory
            return timing, line
        except (UnsupportedRow, RuntimeError, MemoryError) as err:
            return cannot_run(self.op_type, err, dtype, layout)


def cannot_run(op_type: str, err: Exception, dtype: torch.dtype, memory_format: str) -> str:
    """Why a row did not run: "unable: <dtype>" where torch has no kernel of the operator for its dtype on
    this device (the sweep names such rows), else the operator and the error."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, RuntimeError) and "not implemented for" in text:
        return f"unable: {str(dtype).removeprefix('torch.')} ({op_type}: {text})"
    return f"{op_type} cannot run: {text}" + (f" (in {memory_format})" if memory_format != "contiguous" else "")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in KERNELS:
        print(f"usage: python -m dlbench.backends.torch {{{','.join(KERNELS)}}} INPUT.csv", file=sys.stderr)
        return 2
    op_type, input_path = args[0], Path(args[1])
    configured = _configure()
    if configured is None:
        return 2
    dtype, caches, memory_format = configured
    device = _device_from_env()
    try:
        rows = read_input(input_path)
        step_footprints = read_footprints(footprints_path_for(input_path)) if caches == "step" else {}
    except (OSError, ValueError) as err:
        print(f"cannot read {input_path}: {err}", file=sys.stderr)
        return 2
    run = _Run(
        op_type, device, dtype, memory_format, caches, cold_footprint(caches, device), _memory_fraction_from_env(),
        TimingSettings.from_env(), clock_for(device.type), step_footprints,
    )  # fmt: skip
    failed = 0
    with (
        output_path_for(input_path).open("w", encoding="utf-8") as out,
        samples_path_for(input_path).open("w", encoding="utf-8") as samples_out,
        rotation_path_for(input_path).open("w", encoding="utf-8") as rotation_out,
        torch.inference_mode(False),
        torch.no_grad(),
    ):
        launch = hasattr(run.clock, "launch_ms")  # CUDA events: the host's issuing time is measured apart
        out.write(output_header(launch=launch))
        out.flush()
        samples_out.write(SAMPLES_HEADER)
        rotation_out.write(",".join(ROTATION_HEADER) + "\n")
        for op_id, values in rows:
            timed = run.time(op_id, values)
            if isinstance(timed, str):
                failed += 1
                print(f"id {op_id}: {timed}", file=sys.stderr, flush=True)
                continue
            timing, line = timed
            rotation_out.write(line)
            rotation_out.flush()
            s = timing.stats
            if timing.budget_spent:
                print(
                    f"id {op_id}: time budget of {run.settings.budget_s:g} s spent after {s.reps} repetitions "
                    f"(min_reps {run.settings.min_reps}); the measurement is kept",
                    file=sys.stderr,
                    flush=True,
                )
            samples_out.write(samples_rows(op_id, timing.samples_ms))
            samples_out.flush()  # before the row, so a row that is read always has its samples
            launch_ms = timing.launch_ms if launch else False
            out.write(output_row(op_id, s, cpu_efficiency=timing.cpu_efficiency, launch_ms=launch_ms))
            out.flush()
    return 1 if failed and failed == len(rows) else 0
