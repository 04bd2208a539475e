"""``python -m dlbench.backends.collectives OP INPUT.csv``: one collective benchmark executable per op type.
``--rank OP INPUT.csv`` is one rank of it, for a launcher that starts the ranks itself (srun, torchrun): the
process group comes from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` or Slurm's variables."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        from dlbench.backends.collectives.rank import main as rank_main

        sys.exit(rank_main(sys.argv[2:]))
    from dlbench.backends.collectives.launch import main

    sys.exit(main(sys.argv[1:]))
