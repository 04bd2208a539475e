"""The embedded PyTorch backend: operator kernels behind the executable protocol
(``python -m dlbench.backends.torch OP INPUT.csv``) and the roofline's peak measurements."""
