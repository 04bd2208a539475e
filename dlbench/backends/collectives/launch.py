"""The executable's launcher: rows grouped by ``world_size``, each group run by that many rank processes on
this machine (a loopback rendezvous on a free port), their outputs joined into ``<stem>_out.csv``. It imports
torch only on a GPU (to count the GPUs: more ranks than GPUs is refused before any rank starts); a rank that
fails stops the others, so no rank waits forever in a collective."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from dlbench.core.collectives import COLLECTIVE, COLLECTIVE_OP_TYPES
from dlbench.core.device import check_ranks_fit
from dlbench.core.errors import ConfigurationError
from dlbench.core.ranks import free_port
from dlbench.operators.protocol import ProtocolError, output_path_for, read_input, samples_path_for, write_input

WORLD_SIZE_INDEX = COLLECTIVE.index("world_size")


def rank_command(op_type: str, input_path: Path) -> list[str]:
    return [sys.executable, "-m", "dlbench.backends.collectives", "--rank", op_type, str(input_path)]


def run_ranks(op_type: str, input_path: Path, world_size: int) -> int:
    """Start ``world_size`` ranks on ``input_path``; the exit status of the first rank that failed, else 0."""
    port = free_port()
    ranks = []
    for rank in range(world_size):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
        }
        ranks.append(subprocess.Popen(rank_command(op_type, input_path), env=env))
    status = 0
    try:
        while any(p.poll() is None for p in ranks):
            failed = [p.returncode for p in ranks if p.returncode not in (None, 0)]
            if failed:  # the others would wait in a collective for the rank that left
                status = failed[0]
                break
            time.sleep(0.05)
        status = status or next((p.returncode for p in ranks if p.returncode), 0)
    finally:
        for p in ranks:
            if p.poll() is None:
                p.terminate()
        for p in ranks:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return status


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in COLLECTIVE_OP_TYPES:
        print(
            f"usage: python -m dlbench.backends.collectives {{{','.join(COLLECTIVE_OP_TYPES)}}} INPUT.csv",
            file=sys.stderr,
        )
        return 2
    op_type, input_path = argv[0], Path(argv[1])
    try:
        rows = read_input(input_path)
    except (OSError, ProtocolError) as err:
        print(f"cannot read {input_path}: {err}", file=sys.stderr)
        return 2
    groups: dict[int, list[tuple[int, list[float]]]] = defaultdict(list)
    failed = 0
    for op_id, values in rows:
        size = values[WORLD_SIZE_INDEX] if len(values) == len(COLLECTIVE) else 0
        if size < 1 or not float(size).is_integer():
            failed += 1
            print(f"id {op_id}: expected {', '.join(COLLECTIVE)} with world_size >= 1, got {values}", file=sys.stderr)
            continue
        groups[int(size)].append((op_id, values))
    out_lines: list[str] = []
    sample_lines: list[str] = []
    header = samples_header = ""
    try:  # NCCL runs one rank per GPU: refuse before any rank starts
        if groups and os.environ.get("DLBENCH_DEVICE") == "cuda":
            check_ranks_fit(groups, "cuda")
    except ConfigurationError as err:
        print(f"dlbench collectives: {err}", file=sys.stderr)
        return 2
    for world_size, group in sorted(groups.items()):
        group_input = write_input(input_path.with_name(f"{input_path.stem}_ws{world_size}.csv"), group)
        status = run_ranks(op_type, group_input, world_size)
        if status:
            print(f"{op_type} among {world_size} ranks: a rank exited with status {status}", file=sys.stderr)
        for path, lines in ((output_path_for(group_input), out_lines), (samples_path_for(group_input), sample_lines)):
            if path.is_file():
                text = path.read_text(encoding="utf-8").splitlines(keepends=True)
                if text:
                    if path == output_path_for(group_input):
                        header = text[0]
                    else:
                        samples_header = text[0]
                    lines.extend(text[1:])
    if header:
        output_path_for(input_path).write_text(header + "".join(out_lines), encoding="utf-8")
    if samples_header:
        samples_path_for(input_path).write_text(samples_header + "".join(sample_lines), encoding="utf-8")
    written = len(out_lines)
    return 0 if written else (1 if rows or failed else 0)
