"""The optimizer update as an operator benchmark: the ``SGD`` kernel of the embedded torch backend
(``python -m dlbench.backends.torch_kernels SGD INPUT.csv``) times PyTorch's SGD-with-momentum update (in
place, as training runs it) per parameter shape, under the executable protocol.

The update of one parameter tensor is ``buf.mul_(momentum).add_(grad)`` then ``param.add_(buf, alpha=-lr)``:
three in-place streaming passes over tensors training has just touched. An out-of-place ``Add`` benchmark
allocates a fresh output per call and overestimates it several times over, hence this kernel. Evaluation
uses it for the ``SGD`` operations it adds when no registry entry serves that op_type.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlbench.ops import DESCRIPTORS

SGD_OP_TYPE = "SGD"
SGD_DESCRIPTORS = tuple(DESCRIPTORS[SGD_OP_TYPE])


def builtin_sgd_benchmark():
    """The built-in benchmark as a registry entry (backend torch, CPU and CUDA)."""
    from dlbench.registry import OperatorBenchmark

    return OperatorBenchmark(
        name="dlbench_sgd",
        synonyms=(SGD_OP_TYPE,),
        command=(sys.executable, "-m", "dlbench.backends.torch_kernels", SGD_OP_TYPE),
        param_descr=SGD_DESCRIPTORS,
        permutations=(),
        backend="torch",
        devices=("cpu", "cuda"),
        source=Path(__file__),
        description="SGD with momentum, in place (the embedded torch backend's SGD kernel)",
    )
