"""OmegaConf resolvers the configs use: ``${mul:a,b}`` and ``${unique:}``."""

from __future__ import annotations


def register_resolvers() -> None:
    """``${mul:a,b}`` for shapes derived from the batch size (e.g. tokens = batch x sequence); ``${unique:}``
    for run folders of their own (:func:`dlbench.core.folders.process_suffix`, cached: one value a process,
    copied to a multirun's jobs with Hydra's resolver cache)."""
    import math

    from omegaconf import OmegaConf

    from dlbench.core.folders import process_suffix

    if not OmegaConf.has_resolver("mul"):
        OmegaConf.register_new_resolver("mul", lambda *factors: math.prod(int(f) for f in factors))
    if not OmegaConf.has_resolver("unique"):
        OmegaConf.register_new_resolver("unique", process_suffix, use_cache=True)
