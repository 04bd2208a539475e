"""A recorded H200 training step evaluated offline through the code a GPU run of ``task=evaluate device=cuda``
takes in the default configuration: the operator benchmarks measured in the evaluation's rounds
(evaluate.rounds=3, each with its share of the repetitions, combined), the framework's in interleaved rounds
(measure.rounds=4) by the runner, their protocol files with the launch column, the host issuing times read
from them (the median over the rounds),
the profile folded as the instrumented training writes it, the two-lane timeline, and DDP's terms on the
device lane. Only the CUDA benchmark executables are replaced, by the recording (tests/recorded_benchmark.py:
the H200's own samples, and launch times it synthesises, since the recording predates the launch column)."""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from recorded_benchmark import ROUND_FACTORS, launch_ms, recorded_samples

from dlbench import CONF_DIR
from dlbench.analysis import data_parallel as ddp_model
from dlbench.analysis.predict import FRAMEWORK_MODES, FRAMEWORK_OPS, framework_terms, prediction_terms
from dlbench.analysis.step_run import read_step_profile
from dlbench.analysis.timeline import (
    DEVICE_TERMS,
    gpu_step,
    host_framework_ms,
    non_operator_terms,
    optimizer_calls,
    simulate,
    step_ops,
)
from dlbench.config import register_configs
from dlbench.core.values import Operation
from dlbench.operators.launch import FRAMEWORK_OUT, read_launch_ms
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.protocol import parse_output
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import run_settings
from dlbench.operators.step_rounds import (
    combine_step_rounds,
    round_samples,
    step_launch_ms,
    step_round_settings,
    step_round_stem,
)
from dlbench.training.optimizers import FOLDED_COLUMNS, batch_folded_file, folded_rows
from dlbench.training.profile import PROFILE_COLUMNS, batch_ops_file, operator_table, write_csv
from dlbench.training.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
RECORDING = DATA / "h200_mlp_bs64_protocol"  # the recorded benchmark rows and samples of mlp bs64 on an H200
OPERATIONS = DATA / "h200_mlp_bs64_operations.csv"  # that evaluation's operations (ids, parameters, passes)
TRACE = DATA / "h200_mlp_bs64_trace.json"  # its profiled step
#: what mlp.py's graph gave that evaluation (prediction_terms.csv: 7 autograd-recorded nodes, 1 layout-only)
AUTOGRAD_NODES, LAYOUT_NODES = 7, 1
#: the SGD the script ran (run_facts.json: momentum 0.9, PyTorch's default multi-tensor path)
SGD = {"momentum": 0.9, "dampening": 0, "nesterov": 0, "weight_decay": 0, "maximize": 0, "foreach": 1, "fused": 0}


def default_config():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+benchmark=mlp", "task=evaluate", "device=cuda"])
    return OmegaConf.to_object(cfg)


def recorded_operations() -> dict[str, list[Operation]]:
    """The evaluation's operations by the benchmark that measured them, as the step gave them."""
    frame = pd.read_csv(OPERATIONS)
    out: dict[str, list[Operation]] = {}
    for row in frame.itertuples(index=False):
        params = {k: float(v) for k, v in (p.split("=") for p in str(row.params).split(";"))}
        if row.op_type == "SGD":
            params.update({"tensors": 1, "numel": params["H"] * params["W"], **SGD})
        out.setdefault(str(row.implementation), []).append(
            Operation(int(row.id), str(row.op_type), tuple(params.items()), name=str(row.name),
                      count=int(row.occurrences))
        )  # fmt: skip
    return out


def replayed(entry, stem: str):
    """The registered benchmark with its CUDA executable replaced by the recording."""
    return replace(entry, command=(sys.executable, str(ROOT / "tests" / "recorded_benchmark.py"), str(RECORDING), stem))


def recorded_profile(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The profiled step as the instrumented training writes it (operator table, folded ranges), read back."""
    events = read_trace(TRACE)
    folder.mkdir()
    write_csv(folder / batch_ops_file(5), PROFILE_COLUMNS, operator_table(events, 5))
    write_csv(folder / batch_folded_file(5), FOLDED_COLUMNS, folded_rows(events, 5))
    return read_step_profile(folder, "self_device_us")


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """The GPU branch of task=evaluate on the recording: what it measured, read and predicted."""
    tmp = tmp_path_factory.mktemp("gpu")
    cfg = default_config()
    settings = run_settings(cfg, "cuda")
    registry, protocol, rounds = load_registry(), tmp / "protocol", cfg.evaluate.rounds
    measurements, by_benchmark = {}, {}
    for name, ops in recorded_operations().items():  # as operators/step_benchmarks.py measure_step does
        per_round, samples = [], []
        for index in range(rounds):
            share = step_round_settings(settings, rounds, index)
            result, files = measure_with_progress(replayed(registry.operator(name), f"{name}_evaluate"), ops, share,
                                                  protocol, step_round_stem(name, rounds, index), True)  # fmt: skip
            per_round.append(dict(result.measurements))
            samples.append(round_samples(files.samples_csv))
        by_benchmark[name] = combine_step_rounds(per_round, samples, settings)
        measurements.update(by_benchmark[name])
    framework_ops = [Operation(mode, "FrameworkOverhead", (("ops", FRAMEWORK_OPS), ("mode", mode)),
                               name=f"framework_{name}") for name, mode in FRAMEWORK_MODES.items()]  # fmt: skip
    framework, _ = measure_with_progress(replayed(registry.operator("torch_framework"), "framework"), framework_ops,
                                         settings, protocol, "framework", True)  # fmt: skip
    medians = {n: framework.measurements[m].stats.median_ms / FRAMEWORK_OPS for n, m in FRAMEWORK_MODES.items()}
    framework_ms = host_framework_ms(read_launch_ms(protocol, FRAMEWORK_OUT), medians)
    frame = pd.read_csv(OPERATIONS)
    frame["benchmark_ms"] = frame["id"].map(lambda i: measurements[i].stats.median_ms)
    frame["predicted_ms"] = frame["benchmark_ms"] * frame["occurrences"]
    terms = prediction_terms(frame, framework_terms(AUTOGRAD_NODES, LAYOUT_NODES, framework_ms))
    _, folded = recorded_profile(tmp / "profile")
    return {"settings": settings, "rounds": rounds, "protocol": protocol, "by_benchmark": by_benchmark,
            "frame": frame, "terms": terms, "folded": folded, "framework_ms": framework_ms,
            "launch": step_launch_ms(protocol, rounds)}  # fmt: skip


def test_the_default_configuration_measures_in_three_rounds_into_files_with_launch_times(evaluation):
    assert evaluation["rounds"] == 3 and evaluation["settings"].rounds == 4
    assert evaluation["settings"].device == "cuda"
    protocol = evaluation["protocol"]
    assert len(list(protocol.glob("framework_round[1-4]_out.csv"))) == 4  # measure.rounds: interleaved
    files = {"framework": [protocol / "framework_out.csv"]}
    for name in ("torch_gemm", "torch_relu", "torch_cross_entropy", "torch_sgd"):  # one sweep per round
        files[name] = [protocol / f"{name}_evaluate_r{index}_out.csv" for index in (1, 2, 3)]
    for paths in files.values():
        for path in paths:
            written = parse_output(path)
            assert written.launch_ms and set(written.launch_ms) == set(written.rows), path.name
    for name, measured in evaluation["by_benchmark"].items():  # every sample served came from the H200's
        recorded = recorded_samples(RECORDING, f"{name}_evaluate")
        served: dict[int, list[float]] = {}
        for index in (1, 2, 3):
            for op_id, values in samples_by_id(protocol / f"{name}_evaluate_r{index}_samples.csv").items():
                served.setdefault(op_id, []).extend(values)
        for op_id, m in measured.items():
            assert m.ok and m.stats.reps == 12  # 4 of the 10 min_reps in each of 3 rounds
            assert len(served[op_id]) == 12 and set(served[op_id]) <= set(recorded[op_id])
            assert m.stats.median_ms == pytest.approx(statistics.median(served[op_id]))


def samples_by_id(path: Path) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for line in path.read_text().splitlines()[1:]:
        op_id, ms = line.split(",")
        out.setdefault(int(op_id), []).append(float(ms))
    return out


def test_every_gpu_operations_host_time_is_its_own_benchmarks_launch_time(evaluation):
    frame, launch, folded = evaluation["frame"], evaluation["launch"], evaluation["folded"]
    dispatch = evaluation["framework_ms"]["dispatch"]
    assert dispatch == pytest.approx(launch_ms("framework", 0) / FRAMEWORK_OPS)  # the host's issuing, not the events'
    calls = optimizer_calls(folded)
    assert calls == 3  # SGD with momentum ran multi-tensor: _foreach_mul_ once, _foreach_add_ twice per step
    ops = step_ops(frame, non_operator_terms(evaluation["terms"]), device="cuda", launch_ms=launch,
                   default_host_ms=dispatch, foreach_calls=calls)  # fmt: skip
    by_name = dict(zip(frame["name"], frame["id"], strict=True))
    per_operation = [op for op in ops if op.name in by_name]
    optimizer = set(frame.loc[frame["pass"] == "optimizer", "name"])
    assert {op.name for op in per_operation} == set(frame["name"]) - optimizer
    for op in per_operation:  # the median of its three rounds' launch column: the operation's own launch time
        assert op.host_us == pytest.approx(launch_ms("op", by_name[op.name]) * 1e3), op.name
    assert statistics.median(ROUND_FACTORS[r] for r in (1, 2, 3)) == statistics.median(ROUND_FACTORS.values()) == 1.0
    multi_tensor = [op for op in ops if op.name == "optimizer (multi-tensor)"]
    assert len(multi_tensor) == 3 and all(op.host_us == pytest.approx(dispatch * 1e3) for op in multi_tensor)
    device_us = float(frame["predicted_ms"].sum()) * 1e3
    assert sum(launch.device_us for op in ops for launch in op.launches) == pytest.approx(device_us)


def test_the_recorded_step_predicts_a_two_lane_step_with_ddp_on_the_device_lane(evaluation):
    frame, terms, folded, launch = evaluation["frame"], evaluation["terms"], evaluation["folded"], evaluation["launch"]
    dispatch = evaluation["framework_ms"]["dispatch"]
    single = gpu_step(frame, terms, launch, folded, dispatch)
    host_only = simulate(step_ops(frame, non_operator_terms(terms), device="cpu"))
    assert single.step_us < host_only.step_us  # host and device overlap: less than the sum of terms
    assert single.step_us >= max(single.host_busy_us, single.device_busy_us)
    # DDP among 2 ranks: mlp's eight parameter tensors (registration order), 25 MiB buckets; the all-reduce and
    # DDP's copies as NCCL and the Mul benchmark might measure them (synthesised: no second GPU was recorded)
    sizes = [2048 * 784, 2048, 2048 * 2048, 2048, 2048 * 2048, 2048, 10 * 2048, 10]
    plan = ddp_model.DataParallelPlan.of({"parameter_bytes": ",".join(str(4 * n) for n in sizes),
                                          "bucket_cap_mb": 25.0}, 4)  # fmt: skip
    allreduce = {size: 0.02 + size / 100e6 for size in plan.allreduce_sizes}  # 20 us + 100 GB/s
    copies = {n: 0.003 + 8 * n / 3e9 for n in plan.copy_elements}  # read and write at 3 TB/s
    hides, reason = ddp_model.communication_hides("auto", "cuda", 2, 0, 16)
    step, _ = ddp_model.predict_data_parallel(plan, allreduce, copies, frame, hides, reason)
    ddp_terms = ddp_model.data_parallel_terms(terms, step, 2, len(sizes))
    data_parallel = gpu_step(frame, ddp_terms, launch, folded, dispatch)
    added = float(ddp_terms.loc[ddp_terms["term"].isin(DEVICE_TERMS), "ms"].sum()) * 1e3
    assert added > 0 and data_parallel.device_busy_us == pytest.approx(single.device_busy_us + added)
    metrics = ddp_model.data_parallel_metrics(single.step_us / 1e3, data_parallel.step_us / 1e3, step, 2)
    assert metrics["scaling_efficiency_predicted"] == pytest.approx(single.step_us / data_parallel.step_us)
    assert data_parallel.step_us > single.step_us
