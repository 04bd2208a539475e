"""``python -m dlbench.backends.torch OP INPUT.csv``: one operator benchmark executable per op type."""

import sys

from dlbench.backends.torch.run import main

if __name__ == "__main__":
    sys.exit(main())
