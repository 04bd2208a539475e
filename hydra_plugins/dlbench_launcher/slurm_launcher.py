"""Hydra instantiates launchers only from the ``hydra_plugins`` namespace: this names dlbench's Slurm launcher
(``hydra/launcher=submitit_slurm``) there; the code lives in :mod:`dlbench.cli.slurm`."""

from dlbench.cli import slurm


class SlurmLauncher(slurm.SlurmLauncher):
    """:class:`dlbench.cli.slurm.SlurmLauncher`: submitit's Slurm launcher, checked before submitting and
    watched through ``squeue``."""
