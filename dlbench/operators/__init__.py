"""Config -> operations -> measurements: the registry, aligning parameters, the executable protocol, the runner."""
