"""The optimizer update as an operator benchmark: ``python -m dlbench.evaluate INPUT.csv`` times PyTorch's
SGD-with-momentum update (in place, as training runs it) per parameter shape, under the executable protocol.

The update of one parameter tensor is ``buf.mul_(momentum).add_(grad)`` then ``param.add_(buf, alpha=-lr)``:
three in-place streaming passes over tensors training has just touched. An out-of-place ``Add`` benchmark
allocates a fresh output per call and overestimates it several times over, hence this kernel. Evaluation
uses it for the ``SGD`` operations it adds when no registry entry serves that op_type.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SGD_DESCRIPTORS = ("N", "C", "H", "W")
SGD_OP_TYPE = "SGD"


def builtin_sgd_benchmark():
    """The built-in benchmark as a registry entry (backend torch, CPU and CUDA)."""
    from dlbench.registry import OperatorBenchmark

    return OperatorBenchmark(
        name="dlbench_sgd",
        synonyms=(SGD_OP_TYPE,),
        command=(sys.executable, "-m", "dlbench.evaluate"),
        param_descr=SGD_DESCRIPTORS,
        permutations=(),
        backend="torch",
        devices=("cpu", "cuda"),
        source=Path(__file__),
        description="SGD with momentum, in place (built into dlbench.evaluate)",
    )


def main(argv: list[str] | None = None) -> int:
    import torch

    from dlbench.backends.timing import TimingSettings, time_repeated
    from dlbench.protocol import output_path_for, read_input

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dlbench.evaluate INPUT.csv", file=sys.stderr)
        return 2
    input_path = Path(args[0])
    threads = int(os.environ.get("DLBENCH_THREADS", "0"))
    if threads > 0:
        torch.set_num_threads(threads)
    device = torch.device(os.environ.get("DLBENCH_DEVICE", "cpu").replace("auto", "cpu"))
    dtype = getattr(torch, os.environ.get("DLBENCH_DTYPE", "float32"))
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    settings = TimingSettings.from_env()
    try:
        rows = read_input(input_path)
    except (OSError, ValueError) as err:
        print(f"cannot read {input_path}: {err}", file=sys.stderr)
        return 2
    failed = 0
    with output_path_for(input_path).open("w", encoding="utf-8") as out, torch.no_grad():
        out.write("id,ms,min,max,mean,std,iqr,reps\n")
        for op_id, values in rows:
            if len(values) != len(SGD_DESCRIPTORS) or any(v < 1 or not float(v).is_integer() for v in values):
                print(f"id {op_id}: SGD takes N C H W as positive integers, got {values}", file=sys.stderr)
                failed += 1
                continue
            shape = tuple(int(v) for v in values)
            param, grad, buf = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))

            def update(param=param, grad=grad, buf=buf) -> None:
                buf.mul_(0.9).add_(grad)
                param.add_(buf, alpha=-1e-6)

            s = time_repeated(update, settings, sync).stats
            out.write(
                f"{op_id},{s.median_ms!r},{s.min_ms!r},{s.max_ms!r},{s.mean_ms!r},{s.std_ms!r},{s.iqr_ms!r},{s.reps}\n"
            )
            out.flush()
    return 1 if failed and failed == len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
