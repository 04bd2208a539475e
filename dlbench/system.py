"""A fingerprint of the hardware and software a measurement ran on, as flat string tags."""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from dlbench import PROJECT_ROOT, __version__


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    git = shutil.which("git")
    if not git or not (PROJECT_ROOT / ".git").exists():
        return ""
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [git, "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


@functools.cache
def hardware_tags() -> dict[str, str]:
    """CPU, GPU, host, OS and library versions; torch is imported here, so call it off the hot path."""
    import psutil
    import torch

    tags = {
        "host.name": socket.gethostname(),
        "host.os": f"{platform.system()} {platform.release()}",
        "cpu.model": _cpu_model(),
        "cpu.arch": platform.machine(),
        "cpu.cores_physical": str(psutil.cpu_count(logical=False) or ""),
        "cpu.cores_logical": str(psutil.cpu_count(logical=True) or ""),
        "cpu.affinity": str(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else "",
        "memory.total_gib": f"{psutil.virtual_memory().total / 2**30:.1f}",
        "python.version": platform.python_version(),
        "torch.version": torch.__version__,
        "torch.num_threads": str(torch.get_num_threads()),
        "dlbench.version": __version__,
        "dlbench.git_commit": _git_commit(),
    }
    match = re.search(r"(?:oneDNN\)|MKL-DNN)\s*(v[\d.]+)", torch.__config__.show())
    if match:
        tags["onednn.version"] = match.group(1)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        tags["gpu.name"] = props.name
        tags["gpu.count"] = str(torch.cuda.device_count())
        tags["gpu.memory_gib"] = f"{props.total_memory / 2**30:.1f}"
        tags["cuda.version"] = str(torch.version.cuda)
        tags["cudnn.version"] = str(torch.backends.cudnn.version())
        tags["gpu.driver"] = _nvidia_driver()
    tags["system.id"] = f"{tags['host.name']}|{tags['cpu.model']}|{tags.get('gpu.name', 'no-gpu')}"
    return {k: v for k, v in tags.items() if v}


def _nvidia_driver() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
