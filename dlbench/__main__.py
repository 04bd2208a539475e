"""``python -m dlbench``: see :mod:`dlbench.cli`."""

from dlbench.cli import cli

if __name__ == "__main__":
    cli()
