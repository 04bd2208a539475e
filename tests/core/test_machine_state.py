"""The machine's state as pyperf's ``system show`` reads it: fields from this machine's own procfs and sysfs
(read here independently), a governor and boost read from a sysfs tree laid out as the kernel does, fields the
machine does not expose left out, noisy settings named with their fix, differences listed field by field."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from dlbench.core import machine_state as ms


def test_fields_agree_with_what_this_machine_exposes():
    state = ms.machine_state()
    assert state["kernel"] == platform.release()
    aslr = Path("/proc/sys/kernel/randomize_va_space").read_text().strip()
    assert state["aslr"] == {"0": "off", "1": "partial", "2": "full"}[aslr]
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        text = thp.read_text()
        assert state["thp"] == text[text.index("[") + 1 : text.index("]")]
    if not any(Path("/sys/devices/system/cpu").glob("cpu0/cpufreq/scaling_governor")):
        assert "cpu.governor" not in state  # absent, not guessed
    assert all(value for value in state.values())


def _sysfs(root: Path, governors: list[str], boost: str) -> Path:
    for index, governor in enumerate(governors):
        cpufreq = root / f"cpu{index}" / "cpufreq"
        cpufreq.mkdir(parents=True)
        (cpufreq / "scaling_governor").write_text(governor + "\n")
        (cpufreq / "scaling_driver").write_text("acpi-cpufreq\n")
        (cpufreq / "scaling_max_freq").write_text("3500000\n")
    (root / "cpufreq").mkdir()
    (root / "cpufreq" / "boost").write_text(boost + "\n")
    (root / "isolated").write_text("\n")
    return root


def test_governor_boost_and_isolated_cpus_from_a_sysfs_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ms, "SYS_CPU", _sysfs(tmp_path, ["powersave", "powersave", "performance"], "1"))
    state = ms.machine_state()
    assert state["cpu.governor"] == "performance (1 CPUs), powersave (2 CPUs)"
    assert state["cpu.boost"] == "on" and state["cpu.freq_max_mhz"] == "3500"
    assert state["isolated_cpus"] == "none"
    noisy = ms.noisy_settings(state)
    assert len(noisy) == 2
    assert "cpupower frequency-set -g performance" in noisy[0] and "cpufreq/boost" in noisy[1]
    assert ms.noisy_settings({"cpu.governor": "performance", "cpu.boost": "off"}) == []


def test_differences_list_every_field_that_differs_or_is_missing():
    a = {"kernel": "6.1", "cpu.governor": "performance", "lib.torch": "2.3"}
    b = {"kernel": "6.1", "cpu.governor": "powersave", "thp": "always"}
    assert ms.differences(a, b) == [
        ("cpu.governor", "performance", "powersave"), ("lib.torch", "2.3", ""), ("thp", "", "always"),
    ]  # fmt: skip
