"""``python -m dlbench.backends.torch OP INPUT.csv``: one operator benchmark executable per op type.
``--serve FD`` makes it a persistent worker that runs such command lines one after another
(:mod:`dlbench.core.worker`), importing torch once."""

import sys

from dlbench.backends.torch.run import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) == 3:
        from dlbench.core.worker import serve

        serve(main, int(sys.argv[2]))
    sys.exit(main())
