"""A side of a comparison run in one task: the registry entry it names, or its backend's only one; another
executable or Python interpreter for it; its threads, dtype and environment; and what differs between two."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlbench.config.compare import SideConfig
from dlbench.core.errors import ConfigurationError
from dlbench.operators.compare_sides import describe, differs, side_benchmark, side_settings
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings


def test_a_side_names_its_entry_or_its_backends_only_one_and_an_unknown_one_is_refused_with_the_key():
    registry = load_registry()
    assert side_benchmark(registry, "Relu", SideConfig(backend="torch"), "", "cpu", "compare.a").name == "torch_relu"
    named = side_benchmark(registry, "Relu", SideConfig(implementation="torch_relu"), "onednn", "cpu", "compare.b")
    assert named.name == "torch_relu"
    exe = ["python", "tests/data/compare/scaled_relu.py", "2.5"]  # another program taking torch_relu's parameters
    other = side_benchmark(registry, "Relu", SideConfig(backend="torch", exe=exe), "", "cpu", "compare.b")
    assert other.command[0] == sys.executable and Path(other.command[1]).is_file() and other.command[2] == "2.5"
    assert other.param_descr == registry.operator("torch_relu").param_descr
    with pytest.raises(ConfigurationError, match="compare.b.implementation=nope"):
        side_benchmark(registry, "Relu", SideConfig(implementation="nope"), "torch", "cpu", "compare.b")
    with pytest.raises(ConfigurationError, match=r"compare.b.backend=nothing: no available Relu"):
        side_benchmark(registry, "Relu", SideConfig(backend="nothing"), "torch", "cpu", "compare.b")


def test_another_interpreter_runs_the_entrys_python_command_outside_the_worker(tmp_path: Path):
    from dlbench.operators.embedded import is_embedded

    registry = load_registry()
    python = Path(sys.executable).resolve()
    entry = side_benchmark(registry, "Relu", SideConfig(backend="torch", python=str(python)), "", "cpu", "compare.b")
    assert entry.command[0] == str(python) and entry.command[1:3] == ("-m", "dlbench.backends.torch")
    assert str(python) == sys.executable or not is_embedded(entry.command)  # its own program, not the worker
    with pytest.raises(ConfigurationError, match="compare.b.python=/no/such/python"):
        side_benchmark(registry, "Relu", SideConfig(backend="torch", python="/no/such/python"), "", "cpu", "compare.b")


def test_a_sides_settings_carry_its_threads_dtype_environment_and_the_rounds():
    side = SideConfig(threads=2, dtype="bfloat16", env={"ONEDNN_VERBOSE": "0"})
    settings = side_settings(RunSettings(threads=1), side, 20, python="/opt/other/bin/python")
    env = settings.environment()
    assert (settings.threads, settings.dtype, settings.rounds) == (2, "bfloat16", 20)
    assert env["ONEDNN_VERBOSE"] == "0" and env["OMP_NUM_THREADS"] == "2"
    assert env["PYTHONPATH"]  # the other interpreter finds this project
    same = side_settings(RunSettings(threads=1, dtype="float32"), SideConfig(), 20)
    assert (same.threads, same.dtype, same.extra_env) == (1, "float32", ())


def test_what_differs_between_two_sides_names_each_setting_with_both_values():
    registry = load_registry()
    torch_relu, onednn = registry.operator("torch_relu"), registry.operator("onednn_relu")
    a = describe(torch_relu, RunSettings(threads=1), SideConfig())
    b = describe(onednn, RunSettings(threads=2), SideConfig(env={"X": "1"}))
    assert (
        differs(a, b)
        == "implementation torch_relu -> onednn_relu; backend torch -> onednn; threads 1 -> 2; env - -> X=1"
    )
