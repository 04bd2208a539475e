"""dlbench: evaluate deep-learning workloads at the operator level."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("dlbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

#: The repository root: registry ``exe`` paths and the shipped ``conf/`` resolve against it.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"
