"""MLflow, and only here: the store, tracked runs, the run-opening helper, resume, system fingerprint."""
