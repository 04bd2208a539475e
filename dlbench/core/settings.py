"""The one table of settings an operator benchmark executable is given: config key, ``DLBENCH_*`` variable,
type, default and meaning. The typed config takes its defaults from here, the runner writes the environment
from it, and the embedded kernels read it back through it; the native kernels keep their own defaults in
``native/common/protocol.hpp``, which a test holds to this table."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dlbench.core.dtypes import ELEMENT_TYPE_NAMES, ELEMENT_TYPES, FLOAT_TYPES, MEMORY_FORMATS


@dataclass(frozen=True)
class Setting:
    key: str
    env: str
    type: type
    default: int | float | str
    help: str

    def parse(self, text: str) -> int | float | str:
        """The value of ``text`` as this setting's type; a malformed value names the variable."""
        try:
            return self.type(text)
        except ValueError:
            raise ValueError(f"{self.env}={text!r} is not a valid {self.type.__name__}") from None


#: ``measure.<key>`` in the config: how each operation is timed.
MEASURE_SETTINGS: tuple[Setting, ...] = (
    Setting("warmup", "DLBENCH_WARMUP", int, 3, "warm-up calls before timing"),
    Setting("min_reps", "DLBENCH_MIN_REPS", int, 10, "minimum timed repetitions"),
    Setting("max_reps", "DLBENCH_MAX_REPS", int, 1000, "maximum timed repetitions"),
    Setting("min_time_s", "DLBENCH_MIN_TIME_S", float, 0.2, "keep repeating until this many seconds were timed"),
    Setting(
        "target_rel_ci", "DLBENCH_TARGET_REL_CI", float, 0.02,
        "then repeat until the 95% confidence interval of the median is within this fraction of it (0.02: +-2%)",
    ),
    Setting(
        "max_time_s", "DLBENCH_MAX_TIME_S", float, 1.0,
        "stop repeating for target_rel_ci after this many seconds; the operation is then reported unstable",
    ),
    Setting(
        "op_budget_s", "DLBENCH_OP_BUDGET_S", float, 0.0,
        "seconds one operation may take (warm-up and repetitions); 0: no limit beyond `timeout`",
    ),
    Setting(
        "memory_fraction", "DLBENCH_MEMORY_FRACTION", float, 0.8,
        "skip an operation whose tensors need more than this fraction of the free device memory",
    ),
    Setting(
        "caches", "DLBENCH_CACHES", str, "hot",
        "hot: every call reuses one set of tensors, which stay cached; cold: calls rotate over copies filling twice "
        "the last-level cache, so each reads and writes memory no recent call touched; step: calls rotate over "
        "copies that put each operation's inputs as far back as its reuse distance in the step it came from (the "
        "bytes the step touches between uses of its inputs, written beside the input as <stem>_footprints.csv; "
        "an operation without one is timed hot), capped at twice the last-level cache (embedded torch kernels "
        "only)",
    ),
)  # fmt: skip

#: the values of ``caches``
CACHE_STATES = ("hot", "cold", "step")

#: the values of ``fp32_math``
FP32_MATHS = ("ieee", "tf32", "framework")

#: Top-level config keys an executable is told about, and the verify switch of the native kernels.
RUN_SETTINGS: tuple[Setting, ...] = (
    Setting("threads", "DLBENCH_THREADS", int, 0, "CPU threads (0: all physical cores, not hyper-threads)"),
    Setting("device", "DLBENCH_DEVICE", str, "cpu", "cpu or cuda"),
    Setting("dtype", "DLBENCH_DTYPE", str, "float32", "float32, float16 or bfloat16"),
    Setting(
        "fp32_math",
        "DLBENCH_FP32_MATH",
        str,
        "framework",
        "float32 math on NVIDIA GPUs: ieee (no TF32 anywhere), tf32 (TF32 tensor cores for convolutions and "
        "matmuls), framework (PyTorch's default: cuDNN convolutions may use TF32, matmuls not)",
    ),
    Setting(
        "verify", "DLBENCH_VERIFY", int, 0, "1: compare small problems with a reference, exit non-zero on mismatch"
    ),
)

EXECUTABLE_SETTINGS: tuple[Setting, ...] = MEASURE_SETTINGS + RUN_SETTINGS

#: The memory format of a group of rows, for an executable that takes it through the environment (a registry
#: entry listing ``channels_last`` in ``memory_formats`` without ``row_settings``); never set otherwise
MEMORY_FORMAT_SETTING = Setting(
    "memory_format", "DLBENCH_MEMORY_FORMAT", str, MEMORY_FORMATS[0],
    "contiguous, or channels_last (NHWC strides of 4-D tensors); set for a group of rows of one memory format",
)  # fmt: skip
#: What an executable may take per row (a registry entry's ``row_settings``): numbers after the row's
#: parameters, in this order (:func:`row_code`); else each group of rows of one value gets its variable
ROW_SETTINGS = ("dtype", "memory_format")
#: the dtypes a row may run in
ROW_DTYPES = FLOAT_TYPES


def row_code(key: str, value: str) -> int:
    """The number a row carries for ``key`` (a :data:`ROW_SETTINGS` name): a dtype's ONNX element type, a memory
    format's position in :data:`dlbench.core.dtypes.MEMORY_FORMATS`."""
    return ELEMENT_TYPES[value] if key == "dtype" else MEMORY_FORMATS.index(value)


def row_value(key: str, code: float) -> str:
    """The name a row's number stands for; a number that names nothing raises ``ValueError`` naming it."""
    names = {ELEMENT_TYPES[d]: d for d in ROW_DTYPES} if key == "dtype" else dict(enumerate(MEMORY_FORMATS))
    if not float(code).is_integer() or int(code) not in names:
        known = ELEMENT_TYPE_NAMES.get(int(code), "") if float(code).is_integer() else ""
        raise ValueError(f"{key} {code:g}{f' ({known})' if known else ''} is none of {', '.join(names.values())}")
    return names[int(code)]


#: ``measure.<key>`` in the config that dlbench's runner uses itself; never handed to an executable.
RUNNER_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "rounds", "DLBENCH_ROUNDS", int, 4,
        "measure the operations in this many rounds, each giving every operation its share of the repetitions "
        "(min_reps, max_reps, min_time_s, max_time_s, op_budget_s divided) in a new shuffled order, so a slow "
        "spell of the machine spreads over all of them; 1: each operation in one block",
    ),
    Setting(
        "contended_below", "DLBENCH_CONTENDED_BELOW", float, 0.85,
        "an operation whose threads ran less than this fraction of its timed wall time (CPU time over wall time "
        "x threads that took part) waited for cores other work held: it is measured again at the end and stays "
        "`contended` if it waits again (CPU only); 0: never",
    ),
)  # fmt: skip
_BY_KEY = {s.key: s for s in (*EXECUTABLE_SETTINGS, *RUNNER_SETTINGS, MEMORY_FORMAT_SETTING)}


def default(key: str) -> int | float | str:
    return _BY_KEY[key].default


def to_environment(values: Mapping[str, object]) -> dict[str, str]:
    """``DLBENCH_*`` variables for the settings in ``values`` (by key); floats keep their exact repr."""
    env = {}
    for key, value in values.items():
        setting = _BY_KEY[key]
        env[setting.env] = repr(float(value)) if setting.type is float else str(value)
    return env


def from_environment(keys: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, int | float | str]:
    """The settings ``keys`` as an executable sees them: its environment, else the defaults."""
    env = os.environ if environ is None else environ
    values = {}
    for key in keys:
        setting = _BY_KEY[key]
        text = env.get(setting.env, "").strip()
        values[key] = setting.parse(text) if text else setting.default
    return values
