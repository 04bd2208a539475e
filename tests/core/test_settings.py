"""One table of measurement settings: the config's defaults, the environment handed to executables, the
embedded kernels' reading of it and the native kernels' own defaults all agree with it."""

from __future__ import annotations

import re

import pytest

from dlbench import PROJECT_ROOT
from dlbench.backends.timing import TimingSettings
from dlbench.config import MeasureConfig
from dlbench.core.settings import EXECUTABLE_SETTINGS, MEASURE_SETTINGS, from_environment, to_environment
from dlbench.operators.protocol import ENV_VARS
from dlbench.operators.runner import RunSettings

NATIVE_HEADER = PROJECT_ROOT / "native" / "common" / "protocol.hpp"


def native_defaults() -> dict[str, str]:
    """``name = value`` members of ``struct Settings`` in the native protocol header."""
    body = re.search(r"struct Settings \{(.*?)\n\};", NATIVE_HEADER.read_text(), re.S)
    assert body, f"{NATIVE_HEADER}: no struct Settings"
    members = re.findall(r"^\s*(?:int|double|bool|std::string)\s+(\w+)\s*=\s*([^;]+);", body.group(1), re.M)
    return {name: value.strip().strip('"') for name, value in members}


def test_the_native_kernels_default_to_the_same_values() -> None:
    native = native_defaults()
    for setting in EXECUTABLE_SETTINGS:
        assert setting.key in native, f"{NATIVE_HEADER} has no default for {setting.key}"
        value = native[setting.key]
        expected = setting.default
        if setting.key == "verify":
            assert value == "false" and expected == 0
        elif isinstance(expected, str):
            assert value == expected
        else:
            assert float(value) == pytest.approx(float(expected)), setting.key


def test_the_config_defaults_come_from_the_table() -> None:
    config = MeasureConfig()
    assert {s.key: getattr(config, s.key) for s in MEASURE_SETTINGS} == {s.key: s.default for s in MEASURE_SETTINGS}


def test_what_the_runner_hands_over_is_what_a_kernel_reads_back() -> None:
    settings = RunSettings(
        warmup=7, min_reps=3, max_reps=9, min_time_s=0.125, threads=2, op_budget_s=1.5, target_rel_ci=0.05,
        max_time_s=2.5,
    )  # fmt: skip
    env = settings.environment()
    threads = {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}  # core/cores.py thread_environment
    assert set(env) - threads - {"GLIBC_TUNABLES"} <= set(ENV_VARS)  # the library's own, besides
    read = from_environment([s.key for s in MEASURE_SETTINGS], env)
    assert read == {"warmup": 7, "min_reps": 3, "max_reps": 9, "min_time_s": 0.125, "op_budget_s": 1.5,
                    "memory_fraction": 0.8, "target_rel_ci": 0.05, "max_time_s": 2.5, "caches": "hot"}  # fmt: skip
    assert from_environment(["threads"], env) == {"threads": 2} and env["OMP_NUM_THREADS"] == "2"


def test_the_timing_loop_reads_the_environment_through_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in to_environment({"warmup": 0, "min_reps": 4, "op_budget_s": 2.0, "target_rel_ci": 0.1}).items():
        monkeypatch.setenv(key, value)
    assert TimingSettings.from_env() == TimingSettings(warmup=0, min_reps=4, budget_s=2.0, target_rel_ci=0.1)


def test_a_malformed_variable_is_named() -> None:
    with pytest.raises(ValueError, match="DLBENCH_MIN_REPS='ten'"):
        from_environment(["min_reps"], {"DLBENCH_MIN_REPS": "ten"})
