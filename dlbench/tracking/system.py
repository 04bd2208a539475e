"""A fingerprint of the hardware and software a measurement ran on, as flat string tags."""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from dlbench import PROJECT_ROOT, __version__
from dlbench.core.slurm import slurm_job


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


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def hardware_tags() -> dict[str, str]:
    """The machine's fingerprint (:func:`machine_tags`) and, inside a Slurm job, the job's id, node, partition
    and CPUs (``slurm.*``): runs from different node types of a cluster then compare side by side."""
    job = slurm_job()
    return {**machine_tags(), **(job.tags() if job is not None else {})}


@functools.cache
def machine_tags() -> dict[str, str]:
    """CPU, GPU, host, OS and library versions.

    torch is not imported for this (it costs seconds): versions come from package metadata and the GPU from
    ``nvidia-smi``; details only a live torch knows (oneDNN version, threads, CUDA) are added when torch is
    already loaded in this process.
    """
    import psutil

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
        "torch.version": _package_version("torch"),
        "mlflow.version": _package_version("mlflow"),
        "onnxruntime.version": _package_version("onnxruntime") or _package_version("onnxruntime-gpu"),
        "dlbench.version": __version__,
        "dlbench.git_commit": _git_commit(),
    }
    tags.update(_nvidia_smi())
    tags.update(torch_build_tags())
    tags["system.id"] = f"{tags['host.name']}|{tags['cpu.model']}|{tags.get('gpu.name', 'no-gpu')}"
    return {k: v for k, v in tags.items() if v}


def _torch_build_info() -> dict[str, str]:
    """What only an imported torch can tell: its oneDNN, CUDA and cuDNN versions and default threads."""
    import torch

    info = {"torch.num_threads": str(torch.get_num_threads())}
    match = re.search(r"(?:oneDNN\)|MKL-DNN)\s*(v[\d.]+)", torch.__config__.show())
    if match:
        info["onednn.version"] = match.group(1)
    if torch.cuda.is_available():
        info["cuda.version"] = str(torch.version.cuda)
        info["cudnn.version"] = str(torch.backends.cudnn.version())
    return info


#: a helper process that imports torch once per host, so later sweeps read the answer from a cache
PROBE = "import json, dlbench.tracking.system as s; print(json.dumps(s._torch_build_info()))"


def torch_build_tags() -> dict[str, str]:
    """:func:`_torch_build_info`, from this process when torch is loaded, else from a per-host cache filled
    once by a helper process (importing torch costs seconds that a sweep should not pay every time)."""
    if "torch" in sys.modules:
        return _torch_build_info()
    key = f"{socket.gethostname()}-py{platform.python_version()}-torch{_package_version('torch')}"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlbench" / f"torch-{key}.json"
    try:
        return {str(k): str(v) for k, v in json.loads(cache.read_text()).items()}
    except (OSError, ValueError):
        pass
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [sys.executable, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(info))
    except OSError:
        pass
    return info


def _nvidia_smi() -> dict[str, str]:
    """GPU name, count, memory and driver from ``nvidia-smi``; empty where there is none."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = [line.split(",") for line in out.stdout.strip().splitlines() if line.count(",") == 2]
    if not lines:
        return {}
    name, memory_mib, driver = (part.strip() for part in lines[0])
    return {
        "gpu.name": name,
        "gpu.count": str(len(lines)),
        "gpu.memory_gib": f"{float(memory_mib) / 1024:.1f}" if memory_mib.replace(".", "").isdigit() else "",
        "gpu.driver": driver,
    }


#: the prefix of the machine's state among a run's tags
MACHINE_TAG = "dlbench.machine."


@functools.cache
def machine_record() -> dict[str, str]:
    """The machine's state (:func:`dlbench.core.machine_state.machine_state`) with the library builds only an
    imported torch knows (oneDNN, CUDA, cuDNN: :func:`torch_build_tags`), read once per process."""
    from dlbench.core.machine_state import machine_state

    build = torch_build_tags()
    libraries = {f"lib.{k.removesuffix('.version')}": v for k, v in build.items() if k.endswith(".version")}
    return {**machine_state(), **libraries}


def log_machine_state(run: Any) -> None:
    """Every run's record of the machine: ``dlbench.machine.*`` tags (set in batches under MLflow's
    per-call limit) and ``machine.json``."""
    record = machine_record()
    run.set_tags({f"{MACHINE_TAG}{k}": v for k, v in record.items()})
    run.log_text(json.dumps(record, indent=1, sort_keys=True) + "\n", "machine.json")


def machine_of_run(tags: Mapping[str, object]) -> dict[str, str]:
    """The machine's state from a run's tags (``tags.dlbench.machine.*`` columns of a search, or a run's tags)."""
    out = {}
    for key, value in tags.items():
        name = key.removeprefix("tags.")
        if name.startswith(MACHINE_TAG) and isinstance(value, str) and value:
            out[name[len(MACHINE_TAG) :]] = value
    return out
