"""Folders a command writes into: each one its own, so that two commands (or two passes of one) never share,
overwrite or delete each other's files.

A folder is created fresh with ``mkdir(exist_ok=False)``, which the file system makes atomic: when the name
is taken (a second command in the same run folder, a second training of one evaluation), the next free
``name-2``, ``name-3`` ... is taken instead. Nothing here deletes anything.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

#: how many numbered names :func:`fresh_folder` tries before giving up (a leak, not a busy machine)
MAX_TRIES = 1000


def fresh_folder(parent: Path, name: str) -> Path:
    """A new, empty folder ``parent/name`` (``name-2``, ``name-3`` ... when that exists), made by this call."""
    parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, MAX_TRIES + 1):
        folder = parent / (name if number == 1 else f"{name}-{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise OSError(f"{parent}: {name} and {MAX_TRIES - 1} numbered folders beside it exist; remove old ones")


def process_suffix() -> str:
    """What makes a run folder's name this process's own beside its start time: the process id and a random
    part (two machines sharing a file system may reuse an id). Hydra's ``${unique:}`` resolver."""
    return f"{os.getpid()}-{secrets.token_hex(2)}"
