"""Progress bars that stay quiet when output is not a terminal or the user asked for quiet."""

from __future__ import annotations

import sys
from typing import Any


def progress(total: int, description: str, quiet: bool = False, unit: str = "op") -> Any:
    from tqdm import tqdm

    disable = quiet or not sys.stderr.isatty()
    return tqdm(total=total, desc=description, unit=unit, disable=disable, leave=False, dynamic_ncols=True)
