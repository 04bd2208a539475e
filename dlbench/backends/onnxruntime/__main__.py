"""``python -m dlbench.backends.onnxruntime INPUT.csv``: time each operation's ONNX node with onnxruntime."""

import sys

from dlbench.backends.onnxruntime.run import main

if __name__ == "__main__":
    sys.exit(main())
