"""A whole model's forward latency, end to end, on several engines (an onnxruntime session and a PyTorch eval
forward), timed interleaved with the same threads: ``python -m dlbench.backends.whole_model``."""
