"""What MLflow's UI shows as text: run names that fit the run list's column, metric keys MLflow accepts, the
dlbench command as a run's source, and metric values rounded to the precision a timing has."""

from __future__ import annotations

import getpass
import math
import re
import shlex
import socket
from collections.abc import Iterable, Sequence

from dlbench.core.dtypes import SHORT_NAMES

#: Significant digits of a logged metric: repeated timings scatter by far more than 0.1 %, so a fifth
#: digit would be noise (and the UI would show 16 of them).
METRIC_DIGITS = 4
#: MLflow's limit on the length of a metric key
MAX_KEY_CHARS = 250
#: float32 in a run name says its math (``fp32_math``): fp32ieee, fp32tf32, fp32fw (the framework's default)
SHORT_FP32_MATHS = {"ieee": "ieee", "tf32": "tf32", "framework": "fw"}
HOST_CHARS = 12

_NOT_IN_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")


def round_significant(value: float, digits: int = METRIC_DIGITS) -> float:
    """``value`` to ``digits`` significant digits; integers, zero, NaN and infinities unchanged."""
    if not math.isfinite(value) or value == 0 or float(value).is_integer():
        return float(value)
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def short_host(name: str | None = None) -> str:
    """The host name up to its first dot, at most 12 characters (``node017.cluster.example`` -> ``node017``)."""
    host = (name if name is not None else socket.gethostname()).split(".", 1)[0]
    return host[:HOST_CHARS]


def short_dtype(dtype: str, fp32_math: str = "framework") -> str:
    """``fp16``, ``bf16``; float32 with its math: ``fp32ieee``, ``fp32tf32``, ``fp32fw``."""
    short = SHORT_NAMES.get(dtype, dtype)
    return short + SHORT_FP32_MATHS.get(fp32_math, fp32_math) if dtype == "float32" else short


def run_name(
    benchmark: str, parts: Sequence[str], batch_size: int, dtype: str, device: str = "cpu",
    fp32_math: str = "framework",
) -> str:  # fmt: skip
    """``<benchmark>-<parts>-bs<N>-<dtype>[-<device>]-<host>``, e.g. ``conv-torch_conv-bs8-fp32fw-node017``:
    what differs between runs of one experiment, short enough for the run list. float32 says its math
    (``fp32_math``); the device is named when it is not the CPU (an implementation such as ``torch_conv``
    runs on either)."""
    words = [benchmark, *(p for p in parts if p and p != benchmark), f"bs{batch_size}", short_dtype(dtype, fp32_math)]
    if device and device != "cpu":
        words.append(device)
    words.append(short_host())
    return "-".join(words)


def metric_key(*parts: str) -> str:
    """``parts`` joined by ``/`` as a key MLflow accepts (letters, digits, ``_-. :/``; other characters become
    ``_``), at most 250 characters. Empty, ``.`` and ``..`` segments are dropped or replaced, as MLflow refuses
    a key that reads as a different file path (ONNX node names such as ``/layers/layers.0/Gemm`` start with ``/``)."""
    segments = [_NOT_IN_KEY.sub("_", s) for part in parts for s in part.split("/") if s]
    key = "/".join("_" if s in (".", "..") else s for s in segments)
    return key[:MAX_KEY_CHARS].rstrip("/")


def dlbench_command(overrides: Iterable[str], multirun: bool = False) -> str:
    """The command line that reproduces a run: ``python -m dlbench [-m] OVERRIDES``."""
    return shlex.join(["python", "-m", "dlbench", *(["-m"] if multirun else []), *overrides])


def user_name() -> str:
    """Who ran it (the UI's "Created by"); empty where the system has no name for the user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return ""
