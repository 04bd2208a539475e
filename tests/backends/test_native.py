"""The CMake-built native kernels (oneDNN on the CPU, cuDNN/cuBLAS compiled only): verify modes against
naive references, the executable protocol, per-id reporting of bad rows, and registry integration."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.values import Operation
from dlbench.operators.protocol import parse_output, write_input
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings, measure_operations

pytestmark = pytest.mark.native

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
BUILD = NATIVE / "build"
BIN = BUILD / "bin"
ONEDNN_TARGETS = ("onednn_conv", "onednn_gemm", "onednn_maxpool", "onednn_avgpool", "onednn_batchnorm", "onednn_relu")
CUDA_TARGETS = ("cuda_conv", "cuda_gemm")
EXIT_VERIFY_MISMATCH, EXIT_USAGE, EXIT_INPUT_UNREADABLE, EXIT_NO_DEVICE = 1, 2, 3, 4
#: Settings that keep measured rows short; the numbers are still real measurements.
FAST_ENV = {"DLBENCH_WARMUP": "1", "DLBENCH_MIN_REPS": "2", "DLBENCH_MAX_REPS": "5", "DLBENCH_MIN_TIME_S": "0"}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLBENCH_")}
    env.update(extra)
    return env


def _cmake(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cmake", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _build(targets: tuple[str, ...], configure_args: tuple[str, ...] = ()) -> str:
    """Configure native/ into native/build (once) and build ``targets``; return the configure log."""
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed; the native kernels need it (apt-get install cmake)")
    log = ""
    if configure_args or not (BUILD / "CMakeCache.txt").exists():
        configured = _cmake("-S", str(NATIVE), "-B", str(BUILD), *configure_args)
        log = configured.stdout + configured.stderr
        if configured.returncode != 0:
            pytest.fail(f"cmake configure of native/ failed:\n{log[-4000:]}")
    built = _cmake("--build", str(BUILD), "-j", "2", "--target", *targets)
    if built.returncode != 0:
        pytest.fail(f"building {', '.join(targets)} failed:\n{(built.stdout + built.stderr)[-4000:]}\n{log[-2000:]}")
    return log


@pytest.fixture(scope="session")
def onednn_bin() -> Path:
    """native/build/bin with the oneDNN executables built (fails clearly when cmake or oneDNN is missing)."""
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed; the native kernels need it (apt-get install cmake)")
    if not (BUILD / "CMakeCache.txt").exists():
        configured = _cmake("-S", str(NATIVE), "-B", str(BUILD))
        if configured.returncode != 0:
            pytest.fail(f"cmake configure of native/ failed:\n{(configured.stdout + configured.stderr)[-4000:]}")
    cache = (BUILD / "CMakeCache.txt").read_text(encoding="utf-8")
    if "dnnl_DIR:PATH=" not in cache or "dnnl_DIR:PATH=dnnl_DIR-NOTFOUND" in cache:
        pytest.fail("oneDNN was not found by cmake: install libdnnl-dev (or pass -Ddnnl_DIR) and rebuild native/")
    _build(ONEDNN_TARGETS)
    missing = [t for t in ONEDNN_TARGETS if not (BIN / t).exists()]
    if missing:
        pytest.fail(f"the build produced no {', '.join(missing)} in {BIN}")
    return BIN


def _run_env(exe: Path, args: tuple[str, ...], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a native executable with only the given DLBENCH_* settings."""
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, env=_clean_env(**env), check=False
    )


# Small rows per executable, in canonical descriptor order, covering every mode.
GOOD_ROWS: dict[str, list[list[float]]] = {
    "onednn_conv": [
        [2, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0],
        [2, 16, 14, 14, 32, 3, 3, 0, 1, 2, 1, 2, 2, 2, 1, 4, 1],
        [1, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 2],
    ],
    "onednn_gemm": [[64, 32, 48, 0, 0, 1], [64, 32, 48, 1, 1, 4], [1, 128, 7, 0, 1, 1]],
    "onednn_maxpool": [[2, 8, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 0], [2, 8, 16, 16, 2, 2, 0, 0, 0, 0, 2, 2, 1]],
    "onednn_avgpool": [[2, 8, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 0], [2, 8, 16, 16, 3, 3, 1, 0, 1, 0, 1, 1, 1]],
    "onednn_batchnorm": [[4, 8, 7, 7, 1e-5, 0.9, 0], [4, 8, 7, 7, 1e-5, 0.9, 1], [4, 8, 7, 7, 1e-3, 0.1, 2]],
    "onednn_relu": [[2, 8, 9, 9, 0], [2, 8, 9, 9, 1]],
}


@pytest.mark.parametrize("target", ONEDNN_TARGETS)
def test_onednn_verify_mode_matches_naive_reference(onednn_bin: Path, target: str) -> None:
    result = _run_env(onednn_bin / target, ("--verify",), {}, 120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "all cases match the naive reference" in result.stderr
    assert "MISMATCH" not in result.stderr


def test_verify_mode_is_also_selected_by_the_environment(onednn_bin: Path) -> None:
    result = _run_env(onednn_bin / "onednn_conv", (), {"DLBENCH_VERIFY": "1"}, 120)
    assert result.returncode == 0, result.stderr[-3000:]
    # grouped, dilated, strided and asymmetric-padded problems in all three modes were compared
    assert "g3 mode2 blocked: ok" in result.stderr
    assert "pad0,1,2,0 s2x2" in result.stderr
    assert "d2x2" in result.stderr
    assert "mode1 plain: ok" in result.stderr  # the timed-reorder variant is verified too


def test_verify_with_an_input_file_verifies_then_measures(onednn_bin: Path, tmp_path: Path) -> None:
    path = write_input(tmp_path / "relu.csv", [(5, [1, 2, 3, 4, 0])])
    result = _run_env(onednn_bin / "onednn_relu", (str(path),), {**FAST_ENV, "DLBENCH_VERIFY": "1"}, 120)
    assert result.returncode == 0, result.stderr
    assert set(parse_output(tmp_path / "relu_out.csv").rows) == {5}


@pytest.mark.parametrize("target", ONEDNN_TARGETS)
def test_onednn_executable_writes_one_protocol_row_per_id(onednn_bin: Path, tmp_path: Path, target: str) -> None:
    rows = [(10 + i, values) for i, values in enumerate(GOOD_ROWS[target])]
    path = write_input(tmp_path / f"{target}.csv", rows)
    result = _run_env(onednn_bin / target, (str(path),), {**FAST_ENV, "DLBENCH_THREADS": "1"}, 120)
    assert result.returncode == 0, result.stderr
    out = tmp_path / f"{target}_out.csv"
    header = "id,ms,min,max,mean,std,iqr,reps,p10,p90,ci_low,ci_high,converged"
    assert out.read_text(encoding="utf-8").splitlines()[0] == header
    parsed = parse_output(out, expected_ids=[i for i, _ in rows])
    assert parsed.unit == "ms"
    assert parsed.problems == []
    assert set(parsed.rows) == {i for i, _ in rows}
    assert parsed.samples_path == tmp_path / f"{target}_samples.csv"  # the statistics come from the samples
    for stats in parsed.rows.values():
        assert 0 < stats.min_ms <= stats.p10_ms <= stats.median_ms <= stats.p90_ms <= stats.max_ms
        assert 2 <= stats.reps <= 5
        assert stats.median_ms < 10_000  # milliseconds, not microseconds or nanoseconds


def test_native_rows_carry_the_median_interval_and_their_raw_samples(onednn_bin: Path, tmp_path: Path) -> None:
    path = write_input(tmp_path / "relu.csv", [(1, [1, 8, 16, 16, 0]), (2, [1, 8, 4, 4, 0])])
    env = {"DLBENCH_WARMUP": "1", "DLBENCH_MIN_REPS": "3", "DLBENCH_MIN_TIME_S": "0", "DLBENCH_THREADS": "1"}
    # three repetitions cannot bound a median: its interval is empty, converged unknown, not made up
    few = _run_env(onednn_bin / "onednn_relu", (str(path),), {**env, "DLBENCH_MAX_REPS": "3"}, 120)
    assert few.returncode == 0, few.stderr
    line = (tmp_path / "relu_out.csv").read_text(encoding="utf-8").splitlines()[1].split(",")
    assert line[7] == "3" and line[10:13] == ["", "", ""]
    many = _run_env(onednn_bin / "onednn_relu", (str(path),), {**env, "DLBENCH_TARGET_REL_CI": "0.5"}, 120)
    assert many.returncode == 0, many.stderr
    samples = (tmp_path / "relu_samples.csv").read_text(encoding="utf-8").splitlines()
    assert samples[0] == "id,ms"
    parsed = parse_output(tmp_path / "relu_out.csv", [1, 2], target_rel_ci=0.5)
    for op_id, stats in parsed.rows.items():
        assert stats.reps == sum(1 for s in samples[1:] if s.split(",")[0] == str(op_id)) >= 6
        assert stats.ci_low_ms <= stats.median_ms <= stats.ci_high_ms and stats.converged is not None


@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
def test_a_target_interval_out_of_range_is_a_usage_error(onednn_bin: Path, tmp_path: Path, value: str) -> None:
    path = write_input(tmp_path / "relu.csv", [(1, [1, 8, 4, 4, 0])])
    result = _run_env(onednn_bin / "onednn_relu", (str(path),), {"DLBENCH_TARGET_REL_CI": value}, 60)
    assert result.returncode == EXIT_USAGE and "DLBENCH_TARGET_REL_CI" in result.stderr


def test_bad_conv_rows_are_reported_by_id_and_good_rows_kept(onednn_bin: Path, tmp_path: Path) -> None:
    good = [1, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]
    bad = {
        2: [1, -4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0],  # negative size
        3: [1, 4, 4, 4, 4, 7, 7, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0],  # kernel larger than the padded input
        4: [1, 6, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 0],  # channels not divisible by groups
        5: [1, 4, 8, 8],  # wrong number of parameters
        6: [1, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7],  # unknown mode
        7: [1, 4, 8.5, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0],  # fractional size
    }
    path = write_input(tmp_path / "conv.csv", [(1, good), *bad.items(), (8, good)])
    result = _run_env(onednn_bin / "onednn_conv", (str(path),), FAST_ENV, 120)
    assert result.returncode == 0, result.stderr
    assert set(parse_output(tmp_path / "conv_out.csv").rows) == {1, 8}
    for op_id, reason in [
        (2, "C=-4 must be >= 1"),
        (3, "larger than the padded input 4x4"),
        (4, "C=6 is not divisible by group=4"),
        (5, "expected 17 parameters after the id, got 4"),
        (6, "mode=7 must be 0..2"),
        (7, "H=8.5"),
    ]:
        lines = [line for line in result.stderr.splitlines() if f"id {op_id} " in line]
        assert lines and reason in lines[0], (op_id, result.stderr)


def test_plain_layout_times_the_reorders_too(onednn_bin: Path, tmp_path: Path) -> None:
    rows = [(i, values) for i, values in enumerate(GOOD_ROWS["onednn_conv"])]
    path = write_input(tmp_path / "conv.csv", rows)
    result = _run_env(onednn_bin / "onednn_conv", (str(path),), {**FAST_ENV, "DLBENCH_ONEDNN_LAYOUT": "plain"}, 120)
    assert result.returncode == 0, result.stderr
    assert set(parse_output(tmp_path / "conv_out.csv").rows) == {0, 1, 2}
    bad = _run_env(onednn_bin / "onednn_conv", (str(path),), {"DLBENCH_ONEDNN_LAYOUT": "nhwc"}, 30)
    assert bad.returncode == EXIT_USAGE
    assert "DLBENCH_ONEDNN_LAYOUT='nhwc' must be blocked or plain" in bad.stderr


def test_rows_over_the_memory_fraction_are_skipped_by_id(onednn_bin: Path, tmp_path: Path) -> None:
    path = write_input(tmp_path / "gemm.csv", [(1, [4, 4, 4, 0, 0, 1]), (2, [4096, 4096, 4096, 0, 0, 16])])
    # 16 x 3 x 4096^2 floats twice over is 6 GiB: over 1e-3 of any free memory, while 4x4 fits
    result = _run_env(onednn_bin / "onednn_gemm", (str(path),), {**FAST_ENV, "DLBENCH_MEMORY_FRACTION": "0.001"}, 60)
    assert result.returncode == 0, result.stderr
    assert set(parse_output(tmp_path / "gemm_out.csv").rows) == {1}
    assert "onednn_gemm: id 2 (input line 2): needs 6.0 GiB, over 0.1% of the" in result.stderr


def test_time_budget_shortens_the_repetitions_but_keeps_the_row(onednn_bin: Path, tmp_path: Path) -> None:
    path = write_input(tmp_path / "relu.csv", [(1, [1, 16, 32, 32, 0])])
    env = {"DLBENCH_OP_BUDGET_S": "0.2", "DLBENCH_MIN_REPS": "10000000", "DLBENCH_MAX_REPS": "10000000"}
    result = _run_env(onednn_bin / "onednn_relu", (str(path),), env, 60)
    assert result.returncode == 0, result.stderr
    stats = parse_output(tmp_path / "relu_out.csv").rows[1]
    assert 1 <= stats.reps < 10_000_000
    assert "id 1: time budget of 0.2 s spent after" in result.stderr


def test_non_numeric_field_is_reported_with_its_id(onednn_bin: Path, tmp_path: Path) -> None:
    path = tmp_path / "relu.csv"
    path.write_text("1,1,2,3,4,0\n2,1,two,3,4,0\nthree,1,2,3,4,0\n4,1,2,3,4,1\n", encoding="utf-8")
    result = _run_env(onednn_bin / "onednn_relu", (str(path),), FAST_ENV, 60)
    assert result.returncode == 0, result.stderr
    assert set(parse_output(tmp_path / "relu_out.csv").rows) == {1, 4}
    assert "id 2: " in result.stderr and "'two' is not a number" in result.stderr
    assert ":3: id 'three' is not an integer" in result.stderr


def test_unreadable_input_file_is_a_clear_error(onednn_bin: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.csv"
    result = _run_env(onednn_bin / "onednn_gemm", (str(missing),), FAST_ENV, 30)
    assert result.returncode == EXIT_INPUT_UNREADABLE
    assert f"cannot read input file '{missing}'" in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DLBENCH_MIN_REPS": "many"}, "DLBENCH_MIN_REPS='many' is not an integer"),
        ({"DLBENCH_MIN_REPS": "10", "DLBENCH_MAX_REPS": "3"}, "DLBENCH_MAX_REPS (3) is below DLBENCH_MIN_REPS (10)"),
        ({"DLBENCH_DTYPE": "float16"}, "supports DLBENCH_DTYPE=float32 only"),
        ({"DLBENCH_FP32_MATH": "fast"}, "DLBENCH_FP32_MATH='fast' must be ieee, tf32 or framework"),
        ({"DLBENCH_VERIFY": "yes"}, "DLBENCH_VERIFY='yes' must be 0 or 1"),
        ({"DLBENCH_MEMORY_FRACTION": "1.5"}, "DLBENCH_MEMORY_FRACTION=1.500000 must be a fraction in (0, 1]"),
        ({"DLBENCH_OP_BUDGET_S": "-1"}, "DLBENCH_OP_BUDGET_S='-1' is not a number >= 0"),
        ({"DLBENCH_CACHES": "cold"}, "DLBENCH_CACHES='cold': the native kernels time with hot caches only"),
    ],
)
def test_bad_settings_are_usage_errors_naming_the_variable(
    onednn_bin: Path, tmp_path: Path, env: dict[str, str], message: str
) -> None:
    path = write_input(tmp_path / "relu.csv", [(1, [1, 2, 3, 4, 0])])
    result = _run_env(onednn_bin / "onednn_relu", (str(path),), env, 30)
    assert result.returncode == EXIT_USAGE
    assert message in result.stderr


def test_missing_input_argument_prints_usage(onednn_bin: Path) -> None:
    result = _run_env(onednn_bin / "onednn_conv", (), {}, 30)
    assert result.returncode == EXIT_USAGE
    assert "usage: onednn_conv [--verify] [input.csv]" in result.stderr
    assert "kernel_shape_0" in result.stderr


def test_registry_entries_use_the_canonical_descriptors() -> None:
    registry = load_registry()
    expected = {
        "onednn_conv": ("Conv", "cpu"),
        "onednn_gemm": ("Gemm", "cpu"),
        "onednn_maxpool": ("MaxPool", "cpu"),
        "onednn_avgpool": ("AveragePool", "cpu"),
        "onednn_batchnorm": ("BatchNormalization", "cpu"),
        "onednn_relu": ("Relu", "cpu"),
        "cuda_conv": ("Conv", "cuda"),
        "cuda_gemm": ("Gemm", "cuda"),
    }
    for name, (op_type, device) in expected.items():
        entry = registry.operator(name)
        # the descriptors added later (a Conv's bias, a pool's ceil_mode) are left out: neutral at 0
        assert list(entry.param_descr) == [d for d in DESCRIPTORS[op_type] if d not in ("has_bias", "ceil_mode")], name
        assert entry.serves(op_type), name
        assert entry.backend == ("onednn" if device == "cpu" else "cuda")
        assert device in entry.devices
        assert Path(entry.command[0]) == BIN / name
    assert registry.operator("onednn_gemm").serves("MatMul")
    assert registry.operator("cuda_gemm").serves("MatMul")


def test_runner_measures_operations_through_the_onednn_registry_entry(onednn_bin: Path, tmp_path: Path) -> None:
    entry = load_registry().operator("onednn_conv")
    good = dict(zip(DESCRIPTORS["Conv"], [1, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0], strict=True))
    bad = {**good, "C": 6, "group": 4}
    operations = [
        Operation(id=1, op_type="Conv", params=tuple(good.items())),
        Operation(id=2, op_type="Conv", params=tuple(bad.items())),
    ]
    settings = RunSettings(warmup=1, min_reps=2, max_reps=3, min_time_s=0.0, threads=1, timeout_s=120)
    result, _files = measure_operations(entry, operations, settings, tmp_path)
    assert result.measurements[1].ok
    assert result.measurements[1].stats.median_ms > 0
    assert not result.measurements[2].ok
    assert "not divisible by group" in result.measurements[2].error


def _nvidia_wheel_dir() -> Path | None:
    import site

    for directory in [*site.getsitepackages(), site.getusersitepackages()]:
        candidate = Path(directory) / "nvidia"
        if (candidate / "cudnn" / "include" / "cudnn.h").exists() and any(
            (candidate / sub / "include" / "cublas_v2.h").exists() for sub in ("cu13", "cublas")
        ):
            return candidate
    return None


@pytest.fixture(scope="session")
def cuda_bin() -> Path:
    """native/build/bin with the CUDA executables built from the nvidia pip wheels (or a system install)."""
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc is not installed: the CUDA benchmarks cannot be compiled here")
    if _nvidia_wheel_dir() is None and not Path("/usr/include/cudnn.h").exists():
        pytest.skip("neither the nvidia-cublas/nvidia-cudnn-cu13 pip wheels nor a system cuDNN are installed")
    log = _build(CUDA_TARGETS, ("-DDLBENCH_CUDA=ON",))
    missing = [t for t in CUDA_TARGETS if not (BIN / t).exists()]
    if missing:
        pytest.fail(f"configure did not enable {', '.join(missing)}:\n{log[-4000:]}")
    return BIN


def _has_gpu(exe: Path) -> bool:
    return _run_env(exe, ("--verify",), {"DLBENCH_MIN_REPS": "1"}, 300).returncode != EXIT_NO_DEVICE


@pytest.mark.slow
@pytest.mark.parametrize("target", CUDA_TARGETS)
def test_cuda_benchmarks_compile_and_refuse_to_run_without_a_gpu(cuda_bin: Path, tmp_path: Path, target: str) -> None:
    path = write_input(tmp_path / "in.csv", [(1, [8, 8, 8, 0, 0, 1] if target == "cuda_gemm" else [1] * 17)])
    result = _run_env(cuda_bin / target, (str(path),), FAST_ENV, 120)
    if result.returncode == EXIT_NO_DEVICE:
        assert f"{target} needs an NVIDIA GPU" in result.stderr
        assert not (tmp_path / "in_out.csv").exists()
    else:
        assert result.returncode == 0, result.stderr
        assert set(parse_output(tmp_path / "in_out.csv").rows) == {1}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "env", "message"),
    [
        ("cuda_conv", {"DLBENCH_DTYPE": "int8"}, "DLBENCH_DTYPE='int8' must be float32, float16 or bfloat16"),
        ("cuda_gemm", {"DLBENCH_DTYPE": "float64"}, "DLBENCH_DTYPE='float64' must be float32, float16 or bfloat16"),
        ("cuda_conv", {"DLBENCH_CUDNN_LAYOUT": "chwn"}, "DLBENCH_CUDNN_LAYOUT='chwn' must be nchw or nhwc"),
        ("cuda_conv", {"DLBENCH_CUDNN_TF32": "1"}, "DLBENCH_CUDNN_TF32 is gone: set DLBENCH_FP32_MATH"),
        ("cuda_gemm", {"DLBENCH_FP32_MATH": "tf16"}, "DLBENCH_FP32_MATH='tf16' must be ieee, tf32 or framework"),
    ],
)
def test_cuda_settings_are_checked_before_the_gpu(
    cuda_bin: Path, tmp_path: Path, target: str, env: dict[str, str], message: str
) -> None:
    result = _run_env(cuda_bin / target, ("--verify",), env, 60)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert message in result.stderr


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("target", CUDA_TARGETS)
@pytest.mark.parametrize(
    ("dtype", "fp32_math", "label"),
    [("float32", "ieee", "IEEE math"), ("float32", "tf32", "TF32 math"), ("float16", "", "float16"),
     ("bfloat16", "", "bfloat16")],
)  # fmt: skip
def test_cuda_verify_mode_matches_naive_reference(
    cuda_bin: Path, target: str, dtype: str, fp32_math: str, label: str
) -> None:
    if not _has_gpu(cuda_bin / target):
        pytest.skip("no NVIDIA GPU on this machine")
    env = {"DLBENCH_DTYPE": dtype, **({"DLBENCH_FP32_MATH": fp32_math} if fp32_math else {})}
    result = _run_env(cuda_bin / target, ("--verify",), env, 300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "all cases match the naive reference" in result.stderr
    assert label in result.stderr, "each verify line names the precision it ran in"


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_conv_reports_its_algorithm_per_id(cuda_bin: Path, tmp_path: Path) -> None:
    if not _has_gpu(cuda_bin / "cuda_conv"):
        pytest.skip("no NVIDIA GPU on this machine")
    rows = [
        (1, [2, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]),
        (2, [2, 16, 14, 14, 32, 3, 3, 0, 1, 2, 1, 1, 1, 1, 1, 1, 1]),  # asymmetric pads, backward data
        (3, [1, 3, 2, 2, 4, 5, 5, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0]),  # kernel larger than the input
    ]
    path = write_input(tmp_path / "conv.csv", rows)
    for algo, layout in (("heuristic", "nchw"), ("search", "nhwc")):
        env = {**FAST_ENV, "DLBENCH_CUDNN_ALGO": algo, "DLBENCH_CUDNN_LAYOUT": layout, "DLBENCH_DTYPE": "float16"}
        result = _run_env(cuda_bin / "cuda_conv", (str(path),), env, 300)
        assert result.returncode == 0, result.stderr
        assert set(parse_output(tmp_path / "conv_out.csv").rows) == {1, 2}
        assert "id 1: forward " in result.stderr and f"({algo})" in result.stderr
        assert f"float16, {layout.upper()}" in result.stderr
        assert "id 2: backward-data" in result.stderr
        assert "id 3 " in result.stderr
