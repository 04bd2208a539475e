"""Re-time a recorded aten call (:mod:`dlbench.training.tensor_stats`) with the properties its tensors had in
training beside the same call on plain inputs (contiguous, the benchmark's dtype: the item's ``dtype``, the one
the call was recorded in, else the spec's; random normal values),
interleaved in one process: ``python -m dlbench.backends.torch.retime SPEC.json OUT.json``.

Each item of the spec names a call and the variants to time: ``plain``, ``subnormal`` (subnormal values injected
at the recorded fraction), ``strides`` (the recorded strides), ``dtype`` (the recorded dtypes), ``nonfinite``
(NaN at the recorded fraction), ``threads`` (the step's threads with as many busy processes beside it as the
script's children kept cores busy) and ``recorded`` (every flagged property at once). Every variant runs with
the step's flushing of subnormals (``flush_denormal``), so subnormals the step flushed cost nothing here either."""

from __future__ import annotations

import json
import multiprocessing
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

#: each variant is timed until it has this many seconds of calls (or :data:`MAX_ROUNDS`), interleaved
MIN_TIME_S = 0.15
MIN_ROUNDS = 3
MAX_ROUNDS = 15


#: seconds a competing process may take to acknowledge a switch (it imports torch when it starts)
HANDSHAKE_TIMEOUT_S = 120.0


def _compete(go: Any, working: Any, idle: Any, stop: Any, finished: Any) -> None:
    """One thread of compute (a small GEMM loop, as a busy worker's OpenMP thread runs) while ``go`` is set. It
    acknowledges each switch: ``working`` once it computes, ``idle`` once its last computation has finished."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    idle.set()
    while not stop.is_set():
        if not go.wait(timeout=0.05):
            continue
        idle.clear()
        working.set()
        while go.is_set() and not stop.is_set():
            a = torch.tanh(a @ a)
            with finished.get_lock():
                finished.value += 1
        working.clear()
        idle.set()


class Competitors:
    """Processes that compute beside a timed call when told to, as the script's busy child processes did beside
    its step; started once (each imports torch), switched on and off per timed call. Each switch waits for every
    process's acknowledgement: a call is timed once they compute, and the next call once their last GEMM ended
    (without it, each would finish an in-flight GEMM into the next timed call)."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop = context.Event()
        self.go = [context.Event() for _ in range(count)]
        self.working = [context.Event() for _ in range(count)]
        self.idle = [context.Event() for _ in range(count)]
        self._finished = context.Value("q", 0)
        self.processes = [
            context.Process(target=_compete, args=(*events, self.stop, self._finished), daemon=True)
            for events in zip(self.go, self.working, self.idle, strict=True)
        ]
        for process in self.processes:
            process.start()

    def finished(self) -> int:
        """How many computations the competitors have finished so far."""
        return int(self._finished.value)

    def running(self, count: int) -> _Running:
        return _Running(self, count)

    def switch_on(self, count: int) -> None:
        """The first ``count`` competitors compute: returns once each has acknowledged it started."""
        for go in self.go[:count]:
            go.set()
        self._await(self.working[:count], "start computing")

    def switch_off(self, count: int) -> None:
        """The first ``count`` competitors stop: returns once each has finished its last computation."""
        for go in self.go[:count]:
            go.clear()
        self._await(self.idle[:count], "stop computing")

    def _await(self, events: list[Any], what: str) -> None:
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        for event, process in zip(events, self.processes, strict=False):
            while not event.wait(timeout=0.5):
                if not process.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"a competing process did not {what} (exit code {process.exitcode})")

    def close(self) -> None:
        self.stop.set()
        for go in self.go:
            go.set()  # wakes a waiting process, which then sees stop
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


class _Running:
    def __init__(self, pool: Competitors | None, count: int) -> None:
        self.pool, self.count = pool, count

    def __enter__(self) -> None:
        if self.pool is not None and self.count:
            self.pool.switch_on(self.count)

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None and self.count:
            self.pool.switch_off(self.count)


def build_tensor(record: dict[str, Any], variant: set[str], plain_dtype: str) -> Any:
    """A tensor like ``record`` with the properties of ``variant``; plain: contiguous, normal values."""
    import torch

    recorded = getattr(torch, record["dtype"])
    floating = recorded.is_floating_point
    dtype = recorded if ("dtype" in variant or not floating) else getattr(torch, plain_dtype)
    shape, strides = record["shape"], record["strides"]
    strided = "strides" in variant and not record.get("contiguous", True)
    size = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if n > 0) if strided else 0
    numel = size if strided else max(1, int(record.get("numel", 1)))
    if floating:
        flat = torch.randn(numel, dtype=dtype)
        _inject(flat, record, variant)
    elif dtype == torch.bool:
        flat = torch.rand(numel) < 0.5
    else:
        low, high = int(record.get("min", 0)), int(record.get("max", 1))
        flat = torch.randint(low, high + 1, (numel,), dtype=dtype)
    flat = flat.to(record.get("device", "cpu"))
    if record["numel"] == 0:
        return torch.empty(shape, dtype=dtype, device=flat.device)
    return flat.as_strided(shape, strides) if strided else flat[: record["numel"]].reshape(shape)


def _inject(flat: Any, record: dict[str, Any], variant: set[str]) -> None:
    import torch

    if "subnormal" in variant and record.get("subnormal", 0) > 0:
        mask = torch.rand(flat.numel()) < record["subnormal"]
        tiny = torch.finfo(flat.dtype).tiny
        values = tiny * torch.empty(int(mask.sum()), dtype=flat.dtype).uniform_(0.01, 0.99)
        flat[mask] = values * torch.where(torch.rand(values.numel()) < 0.5, -1.0, 1.0).to(flat.dtype)
    if "nonfinite" in variant and record.get("nonfinite", 0) > 0:
        flat[torch.rand(flat.numel()) < record["nonfinite"]] = float("nan")


def decode(value: Any, variant: set[str], plain_dtype: str) -> Any:
    """A JSON argument back into a call's argument; a ``repr`` cannot come back (ValueError)."""
    import torch

    if isinstance(value, list):
        return [decode(v, variant, plain_dtype) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        return build_tensor(value["tensor"], variant, plain_dtype)
    if "dtype" in value:
        return getattr(torch, value["dtype"])
    if "memory_format" in value:
        return getattr(torch, value["memory_format"])
    if "device" in value:
        return torch.device(value["device"])
    if "float" in value:
        return float(value["float"])
    raise ValueError(f"an argument that cannot be rebuilt: {value.get('repr', value)}")


def aten_callable(name: str, overload: str) -> Any:
    import torch

    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace), op)
    return getattr(packet, overload or "default")


def time_item(item: dict[str, Any], plain_threads: int, plain_dtype: str, pool: Competitors | None) -> dict[str, float]:
    """Median ms per variant of one call, the variants interleaved round by round in a shuffled order."""
    import torch

    call = item["call"]
    func = aten_callable(call["name"], call.get("overload", "default"))
    variants = {v: set(item["flags"]) if v == "recorded" else {v} for v in item["variants"]}
    inputs = {}
    for name, variant in variants.items():
        inputs[name] = (decode(call["args"], variant, plain_dtype),
                        {k: decode(v, variant, plain_dtype) for k, v in call["kwargs"].items()})  # fmt: skip
    # the step's flushing of subnormals, set once the inputs hold theirs (built under it, they would be zeros)
    torch.set_flush_denormal(bool(item.get("flush_denormal", False)))
    try:
        samples = _time_variants(func, inputs, variants, item, plain_threads, pool)
    finally:
        torch.set_flush_denormal(False)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def _time_variants(
    func: Any, inputs: dict[str, Any], variants: dict[str, set[str]], item: dict[str, Any], plain_threads: int,
    pool: Competitors | None,
) -> dict[str, list[float]]:  # fmt: skip
    """Each variant's call timed round by round in a shuffled order, until enough rounds and seconds."""
    import torch

    samples: dict[str, list[float]] = {name: [] for name in variants}
    competitors = int(round(item.get("competitors", 0)))
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    sync = torch.cuda.synchronize if cuda else (lambda: None)  # a GPU call is timed to its end
    order = list(variants)
    for name in order:  # one untimed call each: first-touch pages, kernels chosen
        args, kwargs = inputs[name]
        func(*args, **kwargs)
    for round_index in range(MAX_ROUNDS):
        random.shuffle(order)
        for name in order:
            threaded = "threads" in variants[name]
            torch.set_num_threads(int(item.get("threads", plain_threads)) if threaded else plain_threads)
            args, kwargs = inputs[name]
            with _Running(pool, competitors if threaded else 0):
                if threaded and competitors:
                    func(*args, **kwargs)  # untimed: the competitors have started computing
                sync()
                start = time.perf_counter()
                func(*args, **kwargs)
                sync()
                samples[name].append(time.perf_counter() - start)
        if round_index + 1 >= MIN_ROUNDS and min(sum(s) for s in samples.values()) >= MIN_TIME_S:
            break
    return samples


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    results: list[dict[str, Any]] = []
    count = max((int(round(i.get("competitors", 0))) for i in spec["items"] if "threads" in i["flags"]), default=0)
    pool = Competitors(count) if count else None
    try:
        for item in spec["items"]:
            try:
                results.append(
                    {"key": item["key"], "ms": time_item(item, spec["threads"], item.get("dtype", spec["dtype"]), pool)}
                )
            except Exception as err:  # noqa: BLE001 - one call that cannot be re-timed leaves the others
                results.append({"key": item["key"], "error": f"{type(err).__name__}: {err}"[:300]})
    finally:
        if pool is not None:
            pool.close()
    Path(argv[1]).write_text(json.dumps({"results": results}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def retime_calls(items: list[dict[str, Any]], workdir: Path, threads: int, dtype: str, timeout: float) -> list[dict]:
    """Run the re-timing of ``items`` in a process of its own (torch, ``threads`` OpenMP threads for the plain
    variants); its results by item key, or one error per item when the process failed."""
    from dlbench.core.cores import thread_environment
    from dlbench.core.process import run_command

    workdir.mkdir(parents=True, exist_ok=True)
    spec, out = workdir / "retime_spec.json", workdir / "retime_results.json"
    unique = list({item["key"]: item for item in items}.values())  # a call shared by outliers is timed once
    spec.write_text(json.dumps({"items": unique, "threads": threads, "dtype": dtype}), encoding="utf-8")
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "dlbench.backends.torch.retime", str(spec), str(out)]
    result = run_command(command, timeout=timeout, env=thread_environment(threads), stderr_path=workdir / "retime.txt")
    failure = result.describe_failure()
    if failure or not out.exists():
        return [{"key": item["key"], "error": f"the re-timing {failure or 'wrote nothing'}"} for item in items]
    return json.loads(out.read_text(encoding="utf-8"))["results"]
