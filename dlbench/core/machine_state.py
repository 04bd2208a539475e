"""The machine's state as a benchmark sees it, in the manner of pyperf's ``system show``: CPU model and
microcode, frequency governor and driver, boost/turbo, SMT, ASLR, isolated and tickless CPUs, transparent huge
pages, kernel, library versions, and the GPUs' clocks and driver where there are GPUs. Every field is read
from the system (procfs, sysfs, package metadata, ``nvidia-smi``); a field the machine does not expose is
absent, never guessed. Which settings add noise, and the fix, are :func:`noisy_settings`."""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
#: the packages whose versions a comparison lists when they differ
LIBRARIES = ("torch", "onnxruntime", "onnxruntime-gpu", "numpy", "mlflow")
#: GPU fields from ``nvidia-smi --query-gpu`` (first GPU): field name -> query key
GPU_QUERY = {
    "gpu.name": "name",
    "gpu.driver": "driver_version",
    "gpu.clock_sm_mhz": "clocks.sm",
    "gpu.clock_sm_max_mhz": "clocks.max.sm",
    "gpu.clock_mem_mhz": "clocks.mem",
    "gpu.persistence_mode": "persistence_mode",
    "gpu.power_limit_w": "power.limit",
}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _bracketed(text: str) -> str:
    """The selected value of a sysfs choice list: ``always [madvise] never`` -> ``madvise``."""
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text


def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in _read(Path("/proc/cpuinfo")).splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and "cpu.model" not in fields:
            fields["cpu.model"] = value.strip()
        elif name == "microcode" and "cpu.microcode" not in fields:
            fields["cpu.microcode"] = value.strip()
    return fields


def _joined(values: list[str]) -> str:
    """One value when every CPU agrees, else ``value (n CPUs), ...``."""
    present = [v for v in values if v]
    if not present:
        return ""
    distinct = sorted(set(present))
    return distinct[0] if len(distinct) == 1 else ", ".join(f"{v} ({present.count(v)} CPUs)" for v in distinct)


def _frequency() -> dict[str, str]:
    cpus = sorted(SYS_CPU.glob("cpu[0-9]*/cpufreq"))
    fields = {
        "cpu.governor": _joined([_read(c / "scaling_governor") for c in cpus]),
        "cpu.freq_driver": _joined([_read(c / "scaling_driver") for c in cpus]),
        "cpu.freq_max_mhz": _joined([_mhz(_read(c / "scaling_max_freq")) for c in cpus]),
    }
    boost = _read(SYS_CPU / "cpufreq" / "boost")
    no_turbo = _read(SYS_CPU / "intel_pstate" / "no_turbo")
    if boost in ("0", "1"):
        fields["cpu.boost"] = "on" if boost == "1" else "off"
    elif no_turbo in ("0", "1"):
        fields["cpu.boost"] = "off" if no_turbo == "1" else "on"
    return fields


def _mhz(khz: str) -> str:
    return str(int(khz) // 1000) if khz.isdigit() else ""


def _kernel() -> dict[str, str]:
    aslr = {"0": "off", "1": "partial", "2": "full"}
    return {
        "kernel": platform.release(),
        "smt": _read(SYS_CPU / "smt" / "control"),
        "smt_active": _read(SYS_CPU / "smt" / "active"),
        "aslr": aslr.get(_read(Path("/proc/sys/kernel/randomize_va_space")), ""),
        "isolated_cpus": _read(SYS_CPU / "isolated") or ("none" if (SYS_CPU / "isolated").exists() else ""),
        "nohz_full_cpus": _read(SYS_CPU / "nohz_full") or ("none" if (SYS_CPU / "nohz_full").exists() else ""),
        "thp": _bracketed(_read(Path("/sys/kernel/mm/transparent_hugepage/enabled"))),
        "thp_defrag": _bracketed(_read(Path("/sys/kernel/mm/transparent_hugepage/defrag"))),
    }


def _libraries() -> dict[str, str]:
    fields = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            fields[f"lib.{name}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return fields


def _gpus() -> dict[str, str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    query = ",".join(GPU_QUERY.values())
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = [[p.strip() for p in line.split(",")] for line in out.stdout.strip().splitlines()]
    lines = [line for line in lines if len(line) == len(GPU_QUERY)]
    if not lines:
        return {}
    first = dict(zip(GPU_QUERY, lines[0], strict=True))
    fields = {k: v for k, v in first.items() if v and "N/A" not in v and "Not Supported" not in v}
    fields["gpu.count"] = str(len(lines))
    return fields


def machine_state() -> dict[str, str]:
    """Every field this machine exposes (see the module's docstring); absent fields are left out."""
    fields = {**_cpuinfo(), **_frequency(), **_kernel(), **_libraries(), **_gpus()}
    return {k: v for k, v in fields.items() if v}


def noisy_settings(state: Mapping[str, str]) -> list[str]:
    """The settings in ``state`` known to add noise to timings, each with its fix."""
    found = []
    governor = state.get("cpu.governor", "")
    if "powersave" in governor or "ondemand" in governor or "schedutil" in governor:
        found.append(
            f"frequency governor {governor}: the clock follows the load (sudo cpupower frequency-set -g performance)"
        )
    if state.get("cpu.boost") == "on":
        found.append(
            "boost/turbo on: the clock depends on temperature and the other cores' load "
            "(echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost, or intel_pstate/no_turbo 1)"
        )
    return found


def differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(field, A's value, B's value) for every field whose value differs, or that one side lacks."""
    return [(k, a.get(k, ""), b.get(k, "")) for k in sorted(set(a) | set(b)) if a.get(k, "") != b.get(k, "")]
