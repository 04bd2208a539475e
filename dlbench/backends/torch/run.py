"""The executable: read the input rows, build each operator's tensors, time it, write ``<stem>_out.csv``."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from dlbench.backends.timing import TimingSettings, clock_for, time_repeated
from dlbench.backends.torch.fp32_math import apply_fp32_math
from dlbench.backends.torch.kernels import DTYPES, KERNELS
from dlbench.backends.torch.layouts import MEMORY_FORMATS, cannot_run, laid_out_as, row_parameters
from dlbench.backends.torch.memory import free_memory, memory_problem, tensor_bytes
from dlbench.backends.torch.params import UnsupportedRow
from dlbench.backends.torch.rotation import cache_cap, fault_in, rotated, row_copies, touched_bytes
from dlbench.core.allocator import release_free_heap
from dlbench.core.cores import resolve_threads
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.settings import CACHE_STATES, from_environment
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
    """Threads and float32 math set from the environment; its dtype, cache state and memory format (a row's own
    come after its parameters), or None after saying what is wrong."""
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
) -> tuple[Callable[[], object], int, int, bool] | str:
    """A row's timed callable, rotating over its copies, with the bytes one copy holds, the copies and whether
    the most copies a row may have cut them; or why
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
    copies, capped = row_copies(caches, cap, row_bytes, step_bytes)
    skip = memory_problem(row_bytes * copies, free_memory(device), memory_fraction)
    return skip or (rotated(build, copies), row_bytes, copies, capped)


def _after_fault_in(fn, copies: int, settings: TimingSettings, device: torch.device) -> TimingSettings:
    """``settings`` for timing ``fn`` after its warm-up calls, which on a CPU go on until its calls stopped
    faulting (:func:`fault_in`)."""
    if device.type != "cpu":
        return settings
    fault_in(fn, copies, settings.warmup)
    return replace(settings, warmup=0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in KERNELS:
        print(f"usage: python -m dlbench.backends.torch {{{','.join(KERNELS)}}} INPUT.csv", file=sys.stderr)
        return 2
    op_type, input_path = args[0], Path(args[1])
    descriptors = DESCRIPTORS[op_type]
    configured = _configure()
    if configured is None:
        return 2
    dtype, caches, memory_format = configured
    device = _device_from_env()
    settings = TimingSettings.from_env()
    memory_fraction = _memory_fraction_from_env()
    cap, cap_source = cache_cap(caches, device)
    clock = clock_for(device.type)  # CUDA events on a GPU: device time, no synchronize per call
    try:
        rows = read_input(input_path)
        step_footprints = read_footprints(footprints_path_for(input_path)) if caches == "step" else {}
    except (OSError, ValueError) as err:
        print(f"cannot read {input_path}: {err}", file=sys.stderr)
        return 2
    failed = 0
    with (
        output_path_for(input_path).open("w", encoding="utf-8") as out,
        samples_path_for(input_path).open("w", encoding="utf-8") as samples_out,
        rotation_path_for(input_path).open("w", encoding="utf-8") as rotation_out,
        torch.inference_mode(False),
        torch.no_grad(),
    ):
        launch = hasattr(clock, "launch_ms")  # CUDA events: the host's issuing time is measured apart
        out.write(output_header(launch=launch))
        out.flush()
        samples_out.write(SAMPLES_HEADER)
        rotation_out.write(",".join(ROTATION_HEADER) + "\n")
        for op_id, values in rows:
            row_dtype, layout = dtype, memory_format
            try:  # a row in its own dtype and memory format where it carries them
                params, row_dtype, layout = row_parameters(op_type, descriptors, values, dtype, memory_format)
                release_free_heap()  # every row starts from the same heap, whatever the rows before it freed
                with laid_out_as(layout):
                    row = _rotation(op_type, params, device, row_dtype, (caches, cap, step_footprints.get(op_id)),
                                    memory_fraction)  # fmt: skip
                if isinstance(row, str):
                    failed += 1
                    print(f"id {op_id}: {row}", file=sys.stderr, flush=True)
                    continue
                fn, row_bytes, copies, capped = row
                rotation_out.write(rotation_line(op_id, row_bytes, copies, cap, cap_source, capped))
                rotation_out.flush()
                timing = time_repeated(fn, _after_fault_in(fn, copies, settings, device), clock=clock)
                del fn  # free this row's tensors before the next row is sized
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # else the caching allocator's hold shows as used memory
            except (UnsupportedRow, RuntimeError, MemoryError) as err:
                failed += 1
                print(f"id {op_id}: {cannot_run(op_type, err, row_dtype, layout)}", file=sys.stderr, flush=True)
                continue
            s = timing.stats
            if timing.budget_spent:
                print(
                    f"id {op_id}: time budget of {settings.budget_s:g} s spent after {s.reps} repetitions "
                    f"(min_reps {settings.min_reps}); the measurement is kept",
                    file=sys.stderr,
                    flush=True,
                )
            samples_out.write(samples_rows(op_id, timing.samples_ms))
            samples_out.flush()  # before the row, so a row that is read always has its samples
            launch_ms = timing.launch_ms if launch else False
            out.write(output_row(op_id, s, cpu_efficiency=timing.cpu_efficiency, launch_ms=launch_ms))
            out.flush()
    return 1 if failed and failed == len(rows) else 0
