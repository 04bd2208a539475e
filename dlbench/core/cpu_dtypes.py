"""Whether this CPU has instructions for a dtype (``/proc/cpuinfo`` flags): a bfloat16 or float16 operation is
benchmarked as it ran either way, and a sweep says in one line when the CPU computes it without them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

#: the cpuinfo flags of instructions that compute in each lower-precision dtype (x86: AVX-512 and AMX; ARM: BF16,
#: FP16); without them the library converts and computes in float32. F16C only converts
INSTRUCTIONS: dict[str, tuple[str, ...]] = {
    "bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
    "float16": ("avx512_fp16", "amx_fp16", "fphp"),
}
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """Every processor's flags (``Features`` on ARM), or None where the file cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def without_instructions(dtypes: Iterable[str], flags: frozenset[str] | None) -> list[str]:
    """The lower-precision dtypes among ``dtypes`` this CPU has none of the instructions of (none when its flags
    are unknown: nothing is claimed)."""
    if flags is None:
        return []
    wanted = sorted({d for d in dtypes if d in INSTRUCTIONS})
    return [d for d in wanted if not flags & set(INSTRUCTIONS[d])]


def instructions_note(dtypes: Iterable[str], device: str, cpuinfo: Path = CPUINFO) -> str:
    """One line where a CPU sweep runs a dtype this CPU has no instructions for, else empty."""
    if device != "cpu":
        return ""
    missing = without_instructions(dtypes, cpu_flags(cpuinfo))
    if not missing:
        return ""
    flags = ", ".join(f for d in missing for f in INSTRUCTIONS[d])
    return (
        f"this CPU has none of {flags}: its {' and '.join(missing)} operations are benchmarked as they ran, "
        "converted and computed in software (usually slower than float32)"
    )
