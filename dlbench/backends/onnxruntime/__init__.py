"""The onnxruntime backend: any ONNX node, run alone as a one-node model with onnxruntime's CPU (or CUDA)
execution provider, behind the executable protocol (``python -m dlbench.backends.onnxruntime INPUT.csv``,
reading each operation's node from ``<stem>_nodes.json``)."""
