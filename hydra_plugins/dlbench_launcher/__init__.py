"""dlbench's Hydra launchers, where Hydra looks for plugins (the ``hydra_plugins`` namespace package)."""
