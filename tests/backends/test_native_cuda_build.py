"""How native/ finds the CUDA family's parts on a machine without a CUDA compiler or toolkit: the runtime,
cuBLAS, cuDNN and cudnn-frontend from NVIDIA's pip wheels (no .cu source is left, so nvcc is not needed), and a
cudnn-frontend older than cudnn_conv.cpp compiles against refused at configure time with the reason. Configured
for real with cmake in a temporary build folder, the toolkit hidden from it (.ci/run installs the wheels)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

NATIVE = Path(__file__).resolve().parents[2] / "native"
SITE = Path(sysconfig.get_paths()["purelib"])
#: what each wheel installs that the family needs (CUDA 13 wheels share nvidia/cu13)
WHEELS = {
    "nvidia-cuda-runtime": "nvidia/cu13/include/cuda_runtime.h",
    "nvidia-cuda-crt": "nvidia/cu13/include/crt/host_config.h",
    "nvidia-cuda-cccl": "nvidia/cu13/include/nv/target",
    "nvidia-cublas": "nvidia/cu13/include/cublasLt.h",
    "nvidia-cudnn-cu13": "nvidia/cudnn/include/cudnn.h",
    "nvidia-cudnn-frontend": "include/cudnn_frontend.h",
}


def wheel_site(tmp_path: Path) -> Path:
    """This Python's site-packages, where the CUDA 13 wheels (.ci/run) installed themselves."""
    missing = [name for name, path in WHEELS.items() if not (SITE / path).exists()]
    if missing:
        pytest.skip(f"the CUDA wheels are not installed: pip install {' '.join(missing)} (see .ci/run)")
    return SITE


def configure(tmp_path: Path, site: Path, *extra: str) -> str:
    """cmake's configure output of native/ with no CUDA compiler on PATH and no CUDA toolkit to find."""
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed; the native kernels need it (apt-get install cmake)")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists())
    done = subprocess.run(
        ["cmake", "-S", str(NATIVE), "-B", str(tmp_path / "build"), "-DDLBENCH_ONEDNN=OFF",
         "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON", f"-DDLBENCH_NVIDIA_WHEEL_DIR={site / 'nvidia'}", *extra],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_cuda_family_builds_from_the_wheels_without_a_cuda_compiler(tmp_path: Path) -> None:
    out = configure(tmp_path, wheel_site(tmp_path))
    assert "CUDA runtime" in out and "the CUDA runtime wheel" in out, out[-2000:]
    assert "cuda_gemm cuda_conv" in out and "SKIPPED cuda" not in out, out[-2000:]
    built = subprocess.run(["cmake", "--build", str(tmp_path / "build"), "-j", "2", "--target", "cuda_gemm"],
                           capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (tmp_path / "build" / "bin" / "cuda_gemm").is_file()


def test_a_cudnn_frontend_older_than_the_code_needs_is_refused_at_configure_time(tmp_path: Path) -> None:
    old = tmp_path / "frontend" / "include"  # the version header of cudnn-frontend 1.12.0 (its handle-only API)
    old.mkdir(parents=True)
    (old / "cudnn_frontend.h").write_text('#include "cudnn_frontend_version.h"\n')
    (old / "cudnn_frontend_version.h").write_text(
        "#define CUDNN_FRONTEND_MAJOR_VERSION 1\n#define CUDNN_FRONTEND_MINOR_VERSION 12\n"
        "#define CUDNN_FRONTEND_PATCH_VERSION 0\n"
    )
    out = configure(tmp_path, wheel_site(tmp_path), f"-DCUDNN_FRONTEND_ROOT={old.parent}")
    assert "SKIPPED cuda_conv: cudnn-frontend 1.12.0" in out and "older than 1.13.0" in out, out[-2000:]
    assert "nvidia-cudnn-frontend>=1.13.0" in out and "cuda_gemm" in out
