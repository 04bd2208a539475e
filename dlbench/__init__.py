"""dlbench: evaluate deep-learning workloads at the operator level."""

from pathlib import Path

#: The repository root: registry ``exe`` paths and the shipped ``conf/`` resolve against it.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"


def __getattr__(name: str) -> str:
    """``__version__`` on first use: importlib.metadata costs tens of milliseconds every command would pay."""
    if name != "__version__":
        raise AttributeError(f"module 'dlbench' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("dlbench")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
