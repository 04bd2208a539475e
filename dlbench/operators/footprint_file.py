"""The files beside a benchmark's input that carry the cache state of ``caches=step``: ``<stem>_footprints.csv``
(``id,footprint_bytes``: each operation's footprint in the step it came from, :mod:`dlbench.onnx.footprint`),
written for the executable, and ``<stem>_rotation.csv`` (``id,row_bytes,copies,rotated_bytes,cap_bytes,cap_source,
max_copies_applied``), written by the embedded torch kernels: how many copies each row's timed calls really
rotated over, where the cap's cache size came from (``sysfs``, ``gpu``, or an assumed ``fallback``), and whether
the most copies a row may have cut its rotation."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from dlbench.core.values import Operation
from dlbench.operators.protocol import ProtocolError

FOOTPRINT_HEADER = ("id", "footprint_bytes")
ROTATION_HEADER = ("id", "row_bytes", "copies", "rotated_bytes", "cap_bytes", "cap_source", "max_copies_applied")


def footprints_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_footprints.csv")


def rotation_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_rotation.csv")


def write_footprints(path: Path, operations: Iterable[Operation]) -> Path:
    """One row per operation that has a footprint; the others are left out (the executable times them hot)."""
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(FOOTPRINT_HEADER)
        writer.writerows((op.id, int(op.footprint_bytes)) for op in operations if op.footprint_bytes is not None)
    return path


def read_footprints(path: Path) -> dict[int, int]:
    """``id -> footprint_bytes``; no file: none. A malformed row raises :class:`ProtocolError` naming it."""
    if not path.exists():
        return {}
    out: dict[int, int] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                op_id, size = int(row["id"]), int(row["footprint_bytes"])
            except (KeyError, TypeError, ValueError) as err:
                raise ProtocolError(f"{path}:{line}: expected id,footprint_bytes as integers ({err})") from err
            if size < 0:
                raise ProtocolError(f"{path}:{line}: footprint_bytes must be >= 0, got {size}")
            out[op_id] = size
    return out


def rotation_line(
    op_id: int, row_bytes: int, copies: int, cap_bytes: int, cap_source: str = "sysfs", capped: bool = False
) -> str:
    return f"{op_id},{row_bytes},{copies},{row_bytes * copies},{cap_bytes},{cap_source},{int(capped)}\n"


def read_rotations(paths: Iterable[Path]):
    """Every row of the rotation files ``paths`` as a DataFrame (the last for an id measured in several rounds)."""
    import pandas as pd  # only the task reading the files back needs it, not the kernels' worker

    frames = [pd.read_csv(p) for p in paths if p.exists() and p.stat().st_size > 0]
    if not frames:
        return pd.DataFrame(columns=list(ROTATION_HEADER))
    return pd.concat(frames, ignore_index=True).drop_duplicates("id", keep="last")


def with_rotation_columns(frame, operations: Iterable[Operation], protocol_dir: Path, stem: str):
    """``frame`` (one row per operation, column ``id``) with the cache state each benchmark ran in:
    ``footprint_bytes`` (the step's reuse distance the rule chose), ``rotation_copies`` and ``rotated_bytes``
    (what the timed calls really cycled through), ``cache_cap_bytes`` (the cap read from the machine),
    ``cache_cap_source`` (where its cache size came from) and ``rotation_max_copies_applied``, from the rotation
    files of the sweeps named ``stem``* in ``protocol_dir``."""
    frame = frame.copy()
    frame["footprint_bytes"] = frame["id"].map({op.id: op.footprint_bytes for op in operations})
    rotations = read_rotations(sorted(protocol_dir.glob(f"*{stem}*_rotation.csv"))).set_index("id")
    for column, source in (("rotation_copies", "copies"), ("rotated_bytes", "rotated_bytes"),
                           ("cache_cap_bytes", "cap_bytes"), ("cache_cap_source", "cap_source"),
                           ("rotation_max_copies_applied", "max_copies_applied")):  # fmt: skip
        frame[column] = frame["id"].map(rotations[source]) if source in rotations else None
    return frame


def rotation_notes(frame) -> list[str]:
    """What a run must say about its rotations (``frame``: :func:`with_rotation_columns`'): a cap from an
    assumed cache size, and rows the most copies cut short (their inputs nearer than their footprint asks)."""
    notes = []
    if "cache_cap_source" in frame and (frame["cache_cap_source"] == "fallback").any():
        cap = frame.loc[frame["cache_cap_source"] == "fallback", "cache_cap_bytes"].max()
        notes.append(f"cache state: the last-level cache's size could not be read (sysfs, the GPU's L2); the "
                     f"rotation's cap assumed {cap / 2 / 2**20:.0f} MiB, twice that rotated")  # fmt: skip
    if "rotation_max_copies_applied" in frame:
        capped = frame[frame["rotation_max_copies_applied"].fillna(0).astype(bool)]
        if len(capped):
            most = int(capped["rotation_copies"].max())
            notes.append(f"cache state: {len(capped)} operation(s) rotated over {most} copies, the most a row may "
                         "have, fewer bytes than their footprint asks (their inputs were nearer in cache than in "
                         "the step)")  # fmt: skip
    return notes
