"""``caches=step``: each row's timed calls rotate over copies that put its inputs as many bytes back as the
footprint its operation has in the step (``<stem>_footprints.csv``), capped at twice the last-level cache; the
copies the rotation built are those ``<stem>_rotation.csv`` logs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from dlbench.backends.torch import kernels, rotation, run
from dlbench.core.values import Operation
from dlbench.operators.footprint_file import footprints_path_for, read_footprints, write_footprints
from dlbench.operators.protocol import parse_output, write_input

MIB = 1 << 20
#: Relu N8 C16 H32 W32: its input and its output, counted by hand
RELU_TENSORS = 2 * 8 * 16 * 32 * 32 * 4


def fake_sysfs(root: Path, caches: dict[int, list[tuple[int, str, str]]]) -> Path:
    """A /sys/devices/system/cpu of CPUs whose caches are (level, size, id), as Linux lays it out."""
    for cpu, entries in caches.items():
        (root / f"cpu{cpu}").mkdir(parents=True)
        for index, (level, size, ident) in enumerate(entries):
            folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
            folder.mkdir(parents=True)
            for name, value in (("level", level), ("size", size), ("id", ident), ("type", "Unified")):
                (folder / name).write_text(f"{value}\n")
    return root


def _measure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, footprints: dict[int, int], llc: str | None,
             shape: tuple[int, ...] = (8, 16, 32, 32)):  # fmt: skip
    """The embedded torch executable over three Relu rows (in this process, so the copies it builds are seen);
    ``llc``: the last-level cache sysfs reports (None: no cache sizes at all)."""
    caches = {0: [(1, "32K", "0"), (2, "512K", "0")] + ([(3, llc, "0")] if llc else [])} if llc else {0: []}
    monkeypatch.setattr(rotation, "CPU_ROOT", fake_sysfs(tmp_path / "cpu", caches))
    for key, value in {"DLBENCH_MIN_REPS": "2", "DLBENCH_MAX_REPS": "4", "DLBENCH_MIN_TIME_S": "0",
                       "DLBENCH_WARMUP": "1", "DLBENCH_THREADS": "1", "DLBENCH_CACHES": "step"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    built: dict[int, list[torch.Tensor]] = {}
    relu, row = kernels.KERNELS["Relu"], [0]

    def counting(params, device, dtype):  # each copy's input tensor, kept to count the distinct storage built
        made = relu(params, device, dtype)
        cells = [cell.cell_contents for cell in made.__closure__ or ()]
        built.setdefault(row[0], []).extend(t for t in cells if isinstance(t, torch.Tensor))
        return made

    def timed(fn, settings, clock):
        row[0] += 1
        return original(fn, settings, clock=clock)

    original = run.time_repeated
    monkeypatch.setitem(kernels.KERNELS, "Relu", counting)
    monkeypatch.setattr(run, "time_repeated", timed)
    path = write_input(tmp_path / "Relu.csv", [(i, [*shape, 0]) for i in range(3)])
    operations = [Operation(i, "Relu", (), footprint_bytes=footprints.get(i)) for i in range(3)]
    write_footprints(footprints_path_for(path), operations)
    assert run.main(["Relu", str(path)]) == 0
    assert sorted(parse_output(tmp_path / "Relu_out.csv", [0, 1, 2]).rows) == [0, 1, 2]
    return pd.read_csv(tmp_path / "Relu_rotation.csv").set_index("id"), built


def test_each_row_rotates_over_its_own_footprint_and_the_copies_built_are_those_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged, built = _measure(tmp_path, monkeypatch, {1: 4 * MIB, 2: 64 * MIB}, "32768K")
    assert (logged["cap_bytes"] == 2 * 32 * MIB).all(), "twice the last-level cache sysfs reports"
    # what one copy holds as the allocator counts it: the input and the output, counted by hand
    assert ((logged["row_bytes"] >= RELU_TENSORS) & (logged["row_bytes"] < 1.05 * RELU_TENSORS)).all()
    assert logged.loc[0, "copies"] == 1, "an operation without a footprint is timed hot"
    # a call touches the other copies before its own come round: as many bytes as the step's reuse distance,
    # to the nearest whole row
    between = (logged.loc[1, "copies"] - 1) * logged.loc[1, "row_bytes"]
    assert abs(between - 4 * MIB) <= logged.loc[1, "row_bytes"] / 2
    assert logged.loc[2, "rotated_bytes"] <= 2 * 32 * MIB + logged.loc[2, "row_bytes"], "capped"
    assert logged.loc[2, "copies"] > logged.loc[1, "copies"] > 1
    for index, op_id in enumerate(logged.index):  # built before each row is timed, in order
        sizing, tensors = built[index][:2], built[index][2:]  # two copies size the row and are let go
        assert all(t.numel() * t.element_size() == RELU_TENSORS // 2 for t in sizing)
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        assert len(tensors) == len(storages) == logged.loc[op_id, "copies"], "one distinct input per copy"
        assert sum(t.numel() * t.element_size() for t in tensors) == logged.loc[op_id, "copies"] * RELU_TENSORS // 2


def test_a_machine_with_a_larger_cache_lets_a_long_reuse_distance_rotate_wider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, _ = _measure(tmp_path / "a", monkeypatch, {2: 256 * MIB}, "8192K")
    large, _ = _measure(tmp_path / "b", monkeypatch, {2: 256 * MIB}, "65536K")
    assert small.loc[2, "rotated_bytes"] < large.loc[2, "rotated_bytes"]
    assert math.isclose(small.loc[2, "rotated_bytes"], 16 * MIB, rel_tol=0.1)


def test_a_footprint_file_with_a_malformed_row_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "Relu_footprints.csv"
    path.write_text("id,footprint_bytes\n0,12\n1,lots\n")
    with pytest.raises(ValueError, match=r"Relu_footprints.csv:3: expected id,footprint_bytes"):
        read_footprints(path)


def test_the_rotation_file_says_where_the_cap_came_from_and_when_max_copies_cut_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlbench.operators.footprint_file import rotation_notes, with_rotation_columns

    # a row of 2 x 64 bytes with a footprint of 64 MiB wants far more copies than MAX_COPIES
    logged, _ = _measure(tmp_path / "a", monkeypatch, {1: 8 << 10, 2: 64 * MIB}, "32768K", shape=(1, 1, 1, 16))
    assert (logged["cap_source"] == "sysfs").all()
    assert logged.loc[2, "copies"] == rotation.MAX_COPIES and bool(logged.loc[2, "max_copies_applied"])
    assert not logged.loc[[0, 1], "max_copies_applied"].astype(bool).any()
    frame = with_rotation_columns(pd.DataFrame({"id": [0, 1, 2]}), [Operation(i, "Relu", ()) for i in range(3)],
                                  tmp_path / "a", "Relu")  # fmt: skip
    assert frame["rotation_max_copies_applied"].astype(bool).tolist() == [False, False, True]
    (note,) = rotation_notes(frame)
    assert f"1 operation(s) rotated over {rotation.MAX_COPIES} copies" in note
    # no cache size in sysfs: the cap is the fallback's, and the run says so
    fallback, _ = _measure(tmp_path / "b", monkeypatch, {1: 4 * MIB}, None)
    assert (fallback["cap_source"] == "fallback").all()
    assert (fallback["cap_bytes"] == 2 * rotation.FALLBACK_CACHE_BYTES).all()
    frame = with_rotation_columns(pd.DataFrame({"id": [0, 1, 2]}), [Operation(i, "Relu", ()) for i in range(3)],
                                  tmp_path / "b", "Relu")  # fmt: skip
    assert any("could not be read" in n and "32 MiB" in n for n in rotation_notes(frame))
