"""One rank of a collective benchmark: join the process group, time every row with the other ranks, and (rank
0) write ``<stem>_out.csv`` and ``<stem>_samples.csv``. Every rank runs the same number of calls per row (the
count is agreed after the warm-up), each call after a barrier; a row's time is the slowest rank's median, and
its samples are that rank's."""

from __future__ import annotations

import inspect
import math
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dlbench.backends.collectives.ops import COLLECTIVES, UnsupportedRow
from dlbench.backends.timing import TimingSettings
from dlbench.core import dtypes
from dlbench.core.collectives import bandwidths_gbs
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.ranks import RankPlace, rank_place, threads_per_rank
from dlbench.core.settings import from_environment
from dlbench.core.values import TimeStats, median_rel_ci
from dlbench.operators.protocol import (
    SAMPLES_HEADER,
    output_header,
    output_path_for,
    output_row,
    read_input,
    samples_path_for,
    samples_rows,
)

DTYPES = {name: getattr(torch, name) for name in dtypes.DTYPES}
#: extra output columns (the protocol keeps named columns it does not know; results.csv recomputes them)
BANDWIDTH_COLUMNS = ("algbw_gbs", "busbw_gbs")


def bound_device(device: torch.device) -> dict[str, torch.device]:
    """``device_id=`` for ``init_process_group`` where this torch has it (2.3 and later: NCCL's communicator
    bound to the rank's GPU at once); older ones pick it up from ``torch.cuda.set_device``."""
    return {"device_id": device} if "device_id" in inspect.signature(dist.init_process_group).parameters else {}


def _timed_calls(call: Callable[[], object], sync: Callable[[], None], control: object, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        dist.barrier(group=control)
        start_ns = time.perf_counter_ns()
        call()
        sync()
        samples.append((time.perf_counter_ns() - start_ns) / 1e6)
    return samples


def _agreed_max(values: list[float], control: object) -> list[float]:
    """The largest of each value over the ranks: every rank then takes the same decision."""
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=control)
    return [float(v) for v in tensor.tolist()]


def time_row(
    call: Callable[[], object], sync: Callable[[], None], settings: TimingSettings, control: object
) -> list[float]:
    """Milliseconds of each timed call on this rank, as the embedded kernels time theirs: warm-up, at least
    ``min_reps`` calls and ``min_time_s``, then more until every rank's median is known to ``target_rel_ci``
    or ``max_time_s`` ends (``max_reps`` and the operation's budget cap it all). The ranks agree on every
    count (from the slowest rank's figures), so each runs the same calls."""
    started = time.perf_counter()
    for _ in range(max(1, settings.warmup)):
        call()
        sync()
    dist.barrier(group=control)
    start = time.perf_counter()
    call()
    sync()
    per_call, spent = _agreed_max([time.perf_counter() - start, time.perf_counter() - started], control)
    per_call = max(per_call, 1e-7)
    reps = min(max(settings.min_reps, math.ceil(settings.min_time_s / per_call)), settings.max_reps)
    if settings.budget_s > 0:  # at least one timed call
        reps = max(1, min(reps, int((settings.budget_s - spent) / per_call)))
    timing_start = time.perf_counter()
    samples = _timed_calls(call, sync, control, reps)
    while len(samples) < settings.max_reps:
        rel_ci = median_rel_ci(samples)
        worst_ci, elapsed, total = _agreed_max(
            [math.inf if rel_ci is None else rel_ci, time.perf_counter() - timing_start, time.perf_counter() - started],
            control,
        )
        if worst_ci <= settings.target_rel_ci or elapsed >= settings.max_time_s:
            break
        if settings.budget_s > 0 and total >= settings.budget_s:
            break
        samples += _timed_calls(call, sync, control, min(max(1, len(samples) // 2), settings.max_reps - len(samples)))
    return samples


def _environment(place: RankPlace) -> tuple[torch.dtype, str]:
    """The dtype and device from the ``DLBENCH_*`` variables, this rank's threads set; ``ValueError`` says
    what is wrong (a dtype not in the list, CUDA asked for where torch sees none, a rank without its GPU)."""
    run = from_environment(("threads", "dtype", "device"))
    dtype = DTYPES.get(str(run["dtype"]))
    if dtype is None:
        raise ValueError(f"DLBENCH_DTYPE={run['dtype']!r}: use one of {', '.join(DTYPES)}")
    device_name = str(run["device"])
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        raise ValueError("DLBENCH_DEVICE=cuda but torch sees no CUDA device")
    if device_name == "cuda" and place.local_rank >= torch.cuda.device_count():  # NCCL: one GPU per rank
        raise ValueError(f"local rank {place.local_rank} has no GPU of its own ({torch.cuda.device_count()} "
                         "visible): run at most one rank per GPU")  # fmt: skip
    torch.set_num_threads(threads_per_rank(int(run["threads"]), place.local_world_size))
    return dtype, device_name


def join_process_group(
    device_name: str, rank: int, world: int, local_rank: int
) -> tuple[torch.device, object, Callable[[], None]]:
    """This rank in its process group: its device, the group that runs barriers and agreements (gloo, on the
    host), and the device's synchronize. On CUDA: NCCL on the local rank's own GPU."""
    if device_name == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, **bound_device(device))
        return device, dist.new_group(backend="gloo"), torch.cuda.synchronize  # agreement beside NCCL's streams
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(minutes=10))
    return torch.device("cpu"), dist.group.WORLD, lambda: None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in COLLECTIVES:
        print(
            f"usage: python -m dlbench.backends.collectives --rank {{{','.join(COLLECTIVES)}}} INPUT.csv",
            file=sys.stderr,
        )
        return 2
    op_type, input_path = argv[0], Path(argv[1])
    place = rank_place()
    if place is None:
        print("dlbench collectives --rank: set RANK and WORLD_SIZE (or run as a Slurm task)", file=sys.stderr)
        return 2
    rank, world = place.rank, place.world_size
    try:
        dtype, device_name = _environment(place)
    except ValueError as err:
        print(f"dlbench collectives: {err}", file=sys.stderr)
        return 2
    settings = TimingSettings.from_env()
    rows = read_input(input_path)
    device, control, sync = join_process_group(device_name, rank, world, place.local_rank)
    failed = 0
    out = output_path_for(input_path).open("w", encoding="utf-8") if rank == 0 else None
    samples_out = samples_path_for(input_path).open("w", encoding="utf-8") if rank == 0 else None
    try:
        if out is not None and samples_out is not None:
            out.write(output_header().rstrip("\n") + "," + ",".join(BANDWIDTH_COLUMNS) + "\n")
            samples_out.write(SAMPLES_HEADER)
        for op_id, values in rows:
            samples: list[float] = []
            error = ""
            try:
                params = dict(zip(DESCRIPTORS[op_type], values, strict=True))
                if int(params["world_size"]) != world:
                    raise UnsupportedRow(f"world_size {int(params['world_size'])}, the process group has {world}")
                call = COLLECTIVES[op_type](world, rank, int(params["bytes"]), device, dtype)
                samples = time_row(call, sync, settings, control)
                del call
            except (UnsupportedRow, ValueError, RuntimeError) as err:
                error = str(err).splitlines()[0] if str(err) else type(err).__name__
            everyone: list[object] = [None] * world
            dist.all_gather_object(everyone, (samples, error), group=control)
            if out is None or samples_out is None:
                continue
            errors = [e for _, e in everyone if e]  # type: ignore[misc]
            if errors:
                failed += 1
                print(f"id {op_id}: {op_type} cannot run: {errors[0]}", file=sys.stderr, flush=True)
                continue
            slowest = max((s for s, _ in everyone), key=statistics.median)  # type: ignore[misc]
            stats = TimeStats.from_samples(slowest, settings.target_rel_ci)
            algbw, busbw = bandwidths_gbs(op_type, params, stats.median_ms)
            samples_out.write(samples_rows(op_id, slowest))
            samples_out.flush()
            out.write(output_row(op_id, stats).rstrip("\n") + f",{algbw!r},{busbw!r}\n")
            out.flush()
    finally:
        for handle in (out, samples_out):
            if handle is not None:
                handle.close()
        dist.destroy_process_group()
    return 1 if failed and failed == len(rows) else 0
