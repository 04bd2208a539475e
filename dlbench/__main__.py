"""``python -m dlbench``: see :mod:`dlbench.cli`."""

import sys

if __name__ == "__main__":
    try:
        from dlbench.cli import cli
    except KeyboardInterrupt:  # Ctrl-C while the command line is being imported: cli() handles it from here on
        print("dlbench: interrupted", file=sys.stderr)
        sys.exit(130)
    cli()
