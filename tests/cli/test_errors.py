"""Every failure a user can cause reads as a short message - what, where, what to do - with a non-zero exit
status and no traceback; ``verbose=true`` or ``HYDRA_FULL_ERROR=1`` adds the stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FAST, Store, job_runs, mlflow_runs, run_dlbench, write_fake_benchmark
from onnx_models import exported

from dlbench.cli.errors import describe
from dlbench.tracking.naming import short_host


def assert_no_traceback(result) -> None:
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Error executing job" not in output, output


@pytest.mark.parametrize(
    ("overrides", "facts"),
    [
        (["batch_size=0"], ["batch_size must be >= 1, got 0"]),
        (["dtype=fp16"], ["dtype='fp16': use one of float32, float16, bfloat16"]),
        (["+batchsize=8"], ["unknown key 'batchsize'", "+batchsize=8", "did you mean batch_size?"]),
        (["batchsize=8"], ["unknown key 'batchsize'", "did you mean batch_size?"]),
        (["measure.minreps=3"], ["unknown key 'measure.minreps'", "did you mean measure.min_reps?"]),
        (["min_reps=3"], ["did you mean measure.min_reps?"]),
        (["mlflow.uri=http://x"], ["did you mean mlflow.tracking_uri?"]),
        (["batch_size=abc"], ["batch_size=abc", "could not be converted to Integer"]),
    ],
    ids=["batch_size_0", "dtype_fp16", "plus_batchsize", "batchsize", "minreps", "leaf_only", "mlflow_uri", "abc"],
)
def test_configuration_mistakes_are_refused_before_anything_runs(
    tmp_path: Path, overrides: list[str], facts: list[str]
) -> None:
    result = run_dlbench("+benchmark=relu", *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert_no_traceback(result)
    assert result.stderr.startswith("dlbench: ")
    for fact in facts:
        assert fact in result.stderr
    assert not (tmp_path / "mlflow.db").exists(), "nothing may run, not even the store may be created"


def test_an_unknown_benchmark_names_the_closest_and_the_available_ones(tmp_path: Path) -> None:
    result = run_dlbench("+benchmark=cnov", cwd=tmp_path)
    assert result.returncode == 2
    assert_no_traceback(result)
    assert "no benchmark 'cnov'; did you mean conv?" in result.stderr
    assert "gemm" in result.stderr and "roofline" in result.stderr


def test_keys_under_free_form_maps_and_hydra_keys_are_accepted(tmp_path: Path) -> None:
    result = run_dlbench(
        "+benchmark=relu", "benchmark.common.mode=0", "hydra.job.chdir=false", "--cfg", "job", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "mode: 0" in result.stdout


def test_a_crashing_benchmark_is_one_message_and_keeps_the_rows_measured_before(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", behaviour="crash_after_first")
    overrides = ("+benchmark=relu", "backend=custom", *FAST, "--config-dir", str(conf))
    result = run_dlbench(*overrides, cwd=tmp_path, store=store)
    assert result.returncode == 1
    assert_no_traceback(result)
    assert "my_relu" in result.stderr and "was killed by SIGSEGV" in result.stderr
    assert "5 operations (ids 1, 2, 3, 4, 5): no result row in " in result.stderr
    assert result.stderr.count("no result row") == 1
    (run,) = mlflow_runs(store)
    assert run.info.status == "FAILED"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dlbench: run relu-my_relu-bs8-fp32fw-{short_host()} (") and "ended FAILED" in last
    assert run.info.run_id[:8] in last


#: the whole problem of a convolution (a shorter param_descr cannot pose ResNet-50's convolutions at all)
CONV_DESCR = ("N", "C", "H", "W", "K", "kernel_shape_0", "kernel_shape_1", "pads_0", "pads_1", "pads_2", "pads_3",
              "strides_0", "strides_1", "dilations_0", "dilations_1", "group", "mode")  # fmt: skip


def test_a_benchmark_writing_no_output_is_summarised_in_one_line(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", behaviour="no_output", synonyms=("Conv",), param_descr=CONV_DESCR)
    overrides = ("+benchmark=conv", "backend=custom", *FAST, "--config-dir", str(conf))
    result = run_dlbench(*overrides, cwd=tmp_path, store=store)
    assert result.returncode == 1
    assert_no_traceback(result)
    assert "the benchmark wrote no output file" in result.stderr
    assert "23 operations (ids 0, 1, 2, 3, 4 and 18 more): no result row in " in result.stderr
    assert result.stderr.count("no result row") == 1


@pytest.mark.parametrize(
    ("task", "damage"),
    [("task=extract", "truncated"), ("task=benchmark_model", "truncated"), ("task=evaluate", "not_onnx")],
)
def test_a_corrupt_model_file_is_bad_input_named_with_exit_2_and_leaves_no_store(
    tmp_path: Path, task: str, damage: str
) -> None:
    path = tmp_path / "broken.onnx"
    data = exported("mlp").read_bytes()
    path.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"\x08\x07" + bytes(range(256)) * 40)
    result = run_dlbench(task, f"model={path.name}", cwd=tmp_path)  # the default store: ./mlflow.db
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result)
    assert result.stderr.startswith(f"dlbench: {path}: not")
    assert "ONNX model" in result.stderr.splitlines()[0]
    assert not (tmp_path / "mlflow.db").exists(), "MLflow is imported meanwhile, but no store is created"


def test_a_native_backend_before_the_build_says_once_how_to_build_it(tmp_path: Path) -> None:
    # a registry entry like the shipped onednn ones, for a program the native build would make
    conf = tmp_path / "conf" / "registry"
    conf.mkdir(parents=True)
    (conf / "unbuilt_relu.yaml").write_text(
        "name: unbuilt_relu\nsynonyms: [Relu]\nexe: native/build/bin/dlbench_test_unbuilt_relu\n"
        "param_descr: [N, C, H, W, mode]\nbackend: unbuilt\ndevice: cpu\n"
    )
    result = run_dlbench("+benchmark=relu", "backend=unbuilt", "--config-dir", str(conf.parent), cwd=tmp_path)
    assert result.returncode == 1
    assert_no_traceback(result)
    assert result.stderr.count("unbuilt_relu is not available") == 1
    build = "cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release && cmake --build native/build -j"
    assert build in result.stderr
    assert not (tmp_path / "mlflow.db").exists(), "nothing to measure: the store is not even opened"


@pytest.mark.parametrize("how", ["verbose=true", "HYDRA_FULL_ERROR=1"])
def test_the_stack_is_shown_on_request(tmp_path: Path, how: str) -> None:
    overrides = ["+benchmark=relu", "batch_size=0"] + ([how] if how.startswith("verbose") else [])
    env = {"HYDRA_FULL_ERROR": "1"} if how.startswith("HYDRA") else {}
    result = run_dlbench(*overrides, cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "batch_size must be >= 1, got 0" in result.stderr


@pytest.mark.slow
def test_a_failing_job_of_a_multirun_is_named_and_the_others_run(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("-m", "+benchmark=relu", "batch_size=1,0", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "dlbench: job 1 (+benchmark=relu batch_size=0" in result.stderr
    assert "batch_size must be >= 1, got 0" in result.stderr
    (run,) = job_runs(store)  # beside the sweep's own run
    assert run.info.status == "FINISHED" and run.data.params["batch_size"] == "1"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dlbench: run relu-torch_relu-bs1-fp32fw-{short_host()} ({run.info.run_id[:8]}) finished")
    assert "; job 1 failed" in last


def test_an_error_from_a_library_is_reported_as_unexpected_with_its_place() -> None:
    try:
        {}["missing"]
    except KeyError as err:
        message, status = describe(err)
    assert status == 1
    assert message.startswith("unexpected error: KeyError: 'missing'")
    assert "verbose=true" in message and "test_errors.py" in message
