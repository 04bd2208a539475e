"""How native/ finds the CUDA family's parts on a machine without a CUDA compiler: the runtime, cuBLAS, cuDNN
and cudnn-frontend from NVIDIA's pip wheels (no .cu source is left, so nvcc is not needed), and a cudnn-frontend
older than cudnn_conv.cpp compiles against refused at configure time with the reason. Configured for real with
cmake in a temporary build folder; the wheels' folder is laid out from the runtime, cuBLAS and cuDNN this
machine has."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

NATIVE = Path(__file__).resolve().parents[2] / "native"
SITE = Path(sysconfig.get_paths()["purelib"])
TOOLKITS = sorted(glob.glob("/usr/local/cuda*/targets/x86_64-linux")) + sorted(glob.glob("/usr/local/cuda*"))


def _runtime() -> tuple[Path, Path] | None:
    """A CUDA runtime's include folder and libcudart.so.N on this machine."""
    for root in map(Path, TOOLKITS):
        libs = sorted(root.glob("lib*/libcudart.so.*[0-9]"))
        if (root / "include" / "cuda_runtime.h").is_file() and libs:
            return root / "include", libs[0]
    return None


def wheel_site(tmp_path: Path) -> Path:
    """A site-packages laid out as the CUDA 13 wheels install themselves (nvidia-cuda-runtime and nvidia-cublas
    into nvidia/cu13, nvidia-cudnn-cu13 into nvidia/cudnn, nvidia-cudnn-frontend's headers into include/)."""
    runtime = _runtime()
    cublas = SITE / "nvidia" / "cu13"
    wheels = (cublas / "include" / "cublas_v2.h").is_file() and (SITE / "nvidia" / "cudnn").is_dir()
    if runtime is None or not wheels:
        pytest.skip("needs a CUDA runtime (/usr/local/cuda*) and the nvidia-cublas and nvidia-cudnn-cu13 wheels")
    site = tmp_path / "site-packages"
    include, lib = site / "nvidia" / "cu13" / "include", site / "nvidia" / "cu13" / "lib"
    include.mkdir(parents=True)
    lib.mkdir()
    for source in [*runtime[0].iterdir(), *(cublas / "include").iterdir()]:
        (include / source.name).symlink_to(source)
    (lib / runtime[1].name).symlink_to(runtime[1])
    for source in (cublas / "lib").iterdir():
        (lib / source.name).symlink_to(source)
    (site / "nvidia" / "cudnn").symlink_to(SITE / "nvidia" / "cudnn")
    (site / "include").symlink_to(SITE / "include")
    return site


def configure(tmp_path: Path, site: Path, *extra: str) -> str:
    """cmake's configure output of native/ with no CUDA compiler on PATH and no CUDA toolkit to find."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists())
    done = subprocess.run(
        ["cmake", "-S", str(NATIVE), "-B", str(tmp_path / "build"), "-DDLBENCH_ONEDNN=OFF",
         "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON", f"-DDLBENCH_NVIDIA_WHEEL_DIR={site / 'nvidia'}", *extra],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_cuda_family_builds_from_the_wheels_without_a_cuda_compiler(tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed; the native kernels need it (apt-get install cmake)")
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
    (old / "cudnn_frontend.h").write_text("#include \"cudnn_frontend_version.h\"\n")
    (old / "cudnn_frontend_version.h").write_text(
        "#define CUDNN_FRONTEND_MAJOR_VERSION 1\n#define CUDNN_FRONTEND_MINOR_VERSION 12\n"
        "#define CUDNN_FRONTEND_PATCH_VERSION 0\n"
    )
    out = configure(tmp_path, wheel_site(tmp_path), f"-DCUDNN_FRONTEND_ROOT={old.parent}")
    assert "SKIPPED cuda_conv: cudnn-frontend 1.12.0" in out and "older than 1.13.0" in out, out[-2000:]
    assert "nvidia-cudnn-frontend>=1.13.0" in out and "cuda_gemm" in out
