"""cuDNN / cuBLASLt executables vs PyTorch on a GPU: every ResNet-50 convolution and BERT GEMM, forward and both
backwards, per dtype and float32 math; the native / torch time ratio per layer.

    python bench/vendor_vs_torch.py --batch 32 --output vendor_vs_torch.csv
    python bench/vendor_vs_torch.py --precisions fp16 --algos search --ops conv    # a part of it

Native: ``native/build/bin/cuda_conv`` (cuDNN graph API, NCHW like torch's contiguous tensors, engine by
heuristics and by timed search) and ``cuda_gemm`` (cuBLASLt heuristics). Torch: the torch backend's own
executable (``python -m dlbench.backends.torch``), once as it runs in dlbench and once with
``torch.backends.cudnn.benchmark = True``; the faster of the two is the reference. All run the same rows
through the executable protocol with the same timing settings, CUDA events around each call.

Precisions: ``fp32-ieee`` (no TF32 anywhere), ``fp32-tf32`` (TF32 tensor cores for both), ``fp16``, ``bf16``
(float32 accumulation). The GEMM backwards are the GEMMs autograd runs: dA = dC op(B)^T and the weight
gradient op(A)^T dC (transposes as cuBLAS would see them). Target (issue 25): ratio <= 1.05 everywhere.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.core.descriptors import DESCRIPTORS, operation_cost  # noqa: E402
from dlbench.core.process import run_command  # noqa: E402
from dlbench.operators.protocol import output_path_for, parse_output, write_input  # noqa: E402

BIN = REPO / "native" / "build" / "bin"
PRECISIONS = {  # name -> (DLBENCH_DTYPE, DLBENCH_FP32_MATH)
    "fp32-ieee": ("float32", "ieee"),
    "fp32-tf32": ("float32", "tf32"),
    "fp16": ("float16", "framework"),
    "bf16": ("bfloat16", "framework"),
}
MODES = {"Conv": ("fwd", "bwd_data", "bwd_filter"), "Gemm": ("fwd", "bwd_data", "bwd_weights")}


def layers(benchmark: str, batch: int) -> list[tuple[str, dict[str, float]]]:
    """The named operations of conf/benchmark/<benchmark>.yaml at ``batch``, resolved, in canonical params."""
    from omegaconf import OmegaConf

    from dlbench.config import register_resolvers

    register_resolvers()
    path = REPO / "conf" / "benchmark" / f"{benchmark}.yaml"
    node = OmegaConf.create({"batch_size": batch, "benchmark": yaml.safe_load(path.read_text(encoding="utf-8"))})
    config = OmegaConf.to_container(node, resolve=True)["benchmark"]
    op_type = config["op_type"]
    out = []
    for op in config["operations"]:
        params = {**config.get("common", {}), **{k: v for k, v in op.items() if k not in ("name", "count")}}
        out.append((str(op["name"]), {d: float(params.get(d, 0)) for d in DESCRIPTORS[op_type]}))
    return out


def gemm_pass(params: dict[str, float], mode: str) -> dict[str, float]:
    """The GEMM autograd runs for ``mode`` of C = op(A) op(B) (A not transposed in these layers)."""
    m, k, n, tb = params["M"], params["K"], params["N"], params["transB"]
    if mode == "fwd":
        return dict(params)
    if mode == "bwd_data":  # dA (M x K) = dC (M x N) @ op(B)^T
        return {**params, "M": m, "K": n, "N": k, "transA": 0, "transB": 1 - tb}
    # the gradient of the stored B: K x N = A^T dC (transB=0), or N x K = dC^T A (transB=1)
    if tb:
        return {**params, "M": n, "K": m, "N": k, "transA": 1, "transB": 0}
    return {**params, "M": k, "K": m, "N": n, "transA": 1, "transB": 0}


def rows_for(op_type: str, batch: int) -> list[tuple[int, str, str, dict[str, float]]]:
    """(id, layer, mode, params) of every layer in every mode."""
    found = layers("conv" if op_type == "Conv" else "gemm", batch)
    out = []
    for layer, params in found:
        for index, mode in enumerate(MODES[op_type]):
            row = {**params, "mode": float(index)} if op_type == "Conv" else gemm_pass(params, mode)
            out.append((len(out) + 1, layer, mode, row))
    return out


def measure(command: list[str], op_type: str, rows, env: dict[str, str], workdir: Path, stem: str, timeout: float):
    """{id: median ms} of the rows that ran, {id: engine or failure text} from stderr."""
    table = [(i, [p[d] for d in DESCRIPTORS[op_type]]) for i, _, _, p in rows]
    input_csv = write_input(workdir / f"{stem}.csv", table)
    result = run_command([*command, str(input_csv)], timeout=timeout, env=env, cwd=workdir)
    notes: dict[int, str] = {}
    for line in result.stderr.splitlines():
        found = re.search(r"\bid (\d+)\b[^:]*: (.*)", line)
        if found:
            notes.setdefault(int(found.group(1)), found.group(2).strip())
    if result.returncode != 0:
        print(f"{stem}: {command[0]} {result.describe_failure()}: {result.stderr[-1500:]}", file=sys.stderr)
    path = output_path_for(input_csv)
    parsed = parse_output(path, expected_ids=[i for i, *_ in rows]) if path.exists() else None
    times = {i: s.median_ms for i, s in parsed.rows.items()} if parsed else {}
    return times, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    parser.add_argument("--ops", nargs="+", default=["conv", "gemm"], choices=["conv", "gemm"])
    parser.add_argument("--algos", nargs="+", default=["heuristic", "search"], choices=["heuristic", "search"],
                        help="cuda_conv engine choices to time (DLBENCH_CUDNN_ALGO)")  # fmt: skip
    parser.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"], help="cuda_conv DLBENCH_CUDNN_LAYOUT")
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds timed per row at least")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per executable run")
    parser.add_argument("--output", type=Path, default=Path("vendor_vs_torch.csv"))
    parser.add_argument("--device", default="cuda", help="the torch side's device (cpu: a smoke test of the script)")
    args = parser.parse_args(argv)
    base = {
        "DLBENCH_DEVICE": args.device, "DLBENCH_WARMUP": "5", "DLBENCH_MIN_REPS": "20", "DLBENCH_MAX_REPS": "2000",
        "DLBENCH_MIN_TIME_S": str(args.min_time), "DLBENCH_MAX_TIME_S": str(max(4 * args.min_time, 0.2)),
        "PYTHONPATH": str(REPO),
    }  # fmt: skip
    records = []
    with tempfile.TemporaryDirectory(prefix="vendor_vs_torch_") as tmp:
        workdir = Path(tmp)
        for op in args.ops:
            op_type = "Conv" if op == "conv" else "Gemm"
            native = BIN / ("cuda_conv" if op == "conv" else "cuda_gemm")
            if not native.exists():
                raise SystemExit(f"{native} is missing: cmake -S native -B native/build && cmake --build native/build")
            rows = rows_for(op_type, args.batch)
            for precision in args.precisions:
                dtype, fp32_math = PRECISIONS[precision]
                env = {**base, "DLBENCH_DTYPE": dtype, "DLBENCH_FP32_MATH": fp32_math}
                torch_cmd = [sys.executable, "-m", "dlbench.backends.torch", op_type]
                bench_cmd = [sys.executable, str(Path(__file__).resolve()), "--torch-benchmark", op_type]
                tag = f"{op}_{precision}"
                results = {
                    "torch": measure(torch_cmd, op_type, rows, env, workdir, f"torch_{tag}", args.timeout),
                    "torch_bench": measure(bench_cmd, op_type, rows, env, workdir, f"torchb_{tag}", args.timeout),
                }
                algos = args.algos if op == "conv" else ["heuristic"]
                for algo in algos:
                    native_env = {**env, "DLBENCH_CUDNN_ALGO": algo, "DLBENCH_CUDNN_LAYOUT": args.layout}
                    results[f"native_{algo}"] = measure([str(native)], op_type, rows, native_env, workdir,
                                                        f"native_{algo}_{tag}", args.timeout)  # fmt: skip
                for i, layer, mode, params in rows:
                    flops, _ = operation_cost(op_type, params)
                    ms = {name: times.get(i, math.nan) for name, (times, _) in results.items()}
                    reference = min(ms["torch"], ms["torch_bench"])
                    tflops = flops / reference / 1e9 if reference == reference else math.nan
                    record = {"op": op, "precision": precision, "layer": layer, "mode": mode, **ms,
                              "tflops_torch": tflops}  # fmt: skip
                    for algo in algos:
                        record[f"ratio_{algo}"] = ms[f"native_{algo}"] / reference
                        record[f"engine_{algo}"] = results[f"native_{algo}"][1].get(i, "")
                    records.append(record)
    table = pd.DataFrame.from_records(records)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output, index=False)
    shown = [c for c in table.columns if not c.startswith("engine_")]
    with pd.option_context("display.width", 200, "display.max_rows", 2000):
        print(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    for (op, precision), group in table.groupby(["op", "precision"], sort=False):
        reference = group[["torch", "torch_bench"]].min(axis=1)
        for column in (c for c in group.columns if c.startswith("ratio_")):
            ratios = group[column].dropna()
            native = group[column.replace("ratio_", "native_")]
            over = int((ratios > 1.05).sum())
            worst = group.loc[ratios.idxmax(), ["layer", "mode"]].tolist() if len(ratios) else []
            print(
                f"{op} {precision} {column}: sum native {native.sum():.3f} ms vs torch {reference.sum():.3f} ms; "
                f"ratio median {ratios.median():.3f}, max {ratios.max():.3f} {worst}; {over}/{len(group)} over 1.05"
                f"{'; ' + str(len(group) - len(ratios)) + ' rows without a result' if len(ratios) < len(group) else ''}"
            )
    return 0


def torch_benchmark_worker(op_type: str, input_csv: str) -> int:
    """The torch backend's executable with ``torch.backends.cudnn.benchmark = True`` (cuDNN times its engines)."""
    import torch

    from dlbench.backends.torch.run import main as torch_main

    torch.backends.cudnn.benchmark = True
    return torch_main([op_type, input_csv])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--torch-benchmark":
        sys.exit(torch_benchmark_worker(sys.argv[2], sys.argv[3]))
    sys.exit(main())
