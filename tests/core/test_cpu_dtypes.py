"""A bfloat16 or float16 row on a CPU without instructions for it is still benchmarked, and the sweep says so in
one line; a CPU with them, or a GPU, gets no line."""

from __future__ import annotations

from pathlib import Path

from dlbench.core.cpu_dtypes import cpu_flags, instructions_note

ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 f16c avx512f\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2 f16c avx512f\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 avx512_fp16 amx_tile\n"


def cpuinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def test_a_cpu_without_bf16_instructions_is_named_in_one_line(tmp_path: Path) -> None:
    note = instructions_note(["float32", "bfloat16"], "cpu", cpuinfo(tmp_path, ZEN3))
    assert note.startswith("this CPU has none of avx512_bf16, amx_bf16, bf16: its bfloat16 operations")
    assert "\n" not in note and "amx_fp16" not in note


def test_a_cpu_with_them_a_float32_sweep_and_a_gpu_get_no_line(tmp_path: Path) -> None:
    assert instructions_note(["bfloat16", "float16"], "cpu", cpuinfo(tmp_path, SAPPHIRE)) == ""
    assert instructions_note(["float32"], "cpu", cpuinfo(tmp_path, ZEN3)) == ""
    assert instructions_note(["bfloat16"], "cuda", cpuinfo(tmp_path, ZEN3)) == ""


def test_no_cpuinfo_claims_nothing(tmp_path: Path) -> None:
    assert cpu_flags(tmp_path / "missing") is None
    assert instructions_note(["bfloat16"], "cpu", tmp_path / "missing") == ""
