"""oneDNN executable vs PyTorch on the distinct ResNet-50 convolutions: time ratio and GFLOP/s per layer.

Both run through the executable protocol with the same settings and thread count:
``native/build/bin/onednn_conv`` and ``python -m dlbench.backends.torch Conv``. Build native/
first (``cmake -S native -B native/build && cmake --build native/build -j``).

    python bench/native_vs_torch.py --batch 1 8 --threads 2 --rounds 2 --output native_vs_torch.csv

oneDNN is timed twice: ``blocked`` (DLBENCH_ONEDNN_LAYOUT=blocked, the primitive alone, tensors already in
its preferred layouts) and ``plain`` (the NCHW<->blocked reorders of inputs and result timed too, which is
what torch's eager F.conv2d on NCHW tensors does on every call).

torch eager allocates its output (and blocked temporaries) on every call; glibc hands large blocks back
to the kernel on free, so each call pays page faults again (conv1 at batch 1: ~8 ms instead of ~2.3 ms).
``--keep-heap`` sets MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ for both backends so memory is reused
and only the kernels are compared.

On a shared machine one descheduled OpenMP thread stalls a whole layer, so the backends alternate for
``--rounds`` rounds and each layer keeps its best median; the ratio of minimum times is shown as well.
"""

from __future__ import annotations

import argparse
import statistics
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

CONV_YAML = REPO / "conf" / "benchmark" / "conv.yaml"
ONEDNN_CONV = REPO / "native" / "build" / "bin" / "onednn_conv"
#: onednn_conv's param_descr (conf/registry/onednn_conv.yaml): the canonical ones less has_bias (no bias)
NATIVE_CONV = [d for d in DESCRIPTORS["Conv"] if d != "has_bias"]


def resnet50_convolutions(batch: int) -> list[tuple[str, dict[str, float]]]:
    """The named layers of conf/benchmark/conv.yaml with N set to ``batch``, in canonical parameters."""
    config = yaml.safe_load(CONV_YAML.read_text(encoding="utf-8"))
    common = {k: v for k, v in config.get("common", {}).items() if k != "N"}
    layers = []
    for op in config["operations"]:
        params = {**common, **{k: v for k, v in op.items() if k not in ("name", "count")}, "N": batch}
        missing = [d for d in DESCRIPTORS["Conv"] if d not in params]
        if missing:
            raise ValueError(f"{CONV_YAML}: layer {op.get('name')} lacks {', '.join(missing)}")
        layers.append((str(op["name"]), {d: float(params[d]) for d in DESCRIPTORS["Conv"]}))
    return layers


def measure(command: list[str], rows: list[tuple[int, list[float]]], env: dict[str, str], workdir: Path, stem: str):
    """Run one protocol executable on ``rows``; return {id: TimeStats}. Failures are fatal: this is a bench."""
    input_csv = write_input(workdir / f"{stem}.csv", rows)
    result = run_command([*command, str(input_csv)], timeout=3600, env=env, cwd=workdir)
    if result.returncode != 0:
        raise SystemExit(f"{command[0]} {result.describe_failure()}:\n{result.stderr[-3000:]}")
    parsed = parse_output(output_path_for(input_csv), expected_ids=[i for i, _ in rows])
    if parsed.problems or len(parsed.rows) != len(rows):
        raise SystemExit(f"{command[0]}: missing or bad rows: {parsed.problems}\n{result.stderr[-3000:]}")
    return parsed.rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-reps", type=int, default=10)
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds timed per layer at least")
    parser.add_argument("--rounds", type=int, default=2, help="alternate the backends this often; keep the best")
    parser.add_argument("--keep-heap", action="store_true", help="keep freed memory mapped (see above)")
    parser.add_argument("--output", type=Path, default=Path("native_vs_torch.csv"))
    args = parser.parse_args(argv)
    if not ONEDNN_CONV.exists():
        raise SystemExit(f"{ONEDNN_CONV} is missing: cmake -S native -B native/build && cmake --build native/build -j")
    env = {
        "DLBENCH_WARMUP": str(args.warmup),
        "DLBENCH_MIN_REPS": str(args.min_reps),
        "DLBENCH_MAX_REPS": "1000",
        "DLBENCH_MIN_TIME_S": str(args.min_time),
        "DLBENCH_THREADS": str(args.threads),
        "OMP_NUM_THREADS": str(args.threads),
        "DLBENCH_DEVICE": "cpu",
        "DLBENCH_DTYPE": "float32",
    }
    if args.keep_heap:
        env |= {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**32)}
    torch_command = [sys.executable, "-m", "dlbench.backends.torch", "Conv"]
    records = []
    with tempfile.TemporaryDirectory(prefix="native_vs_torch_") as tmp:
        workdir = Path(tmp)
        for batch in args.batch:
            layers = resnet50_convolutions(batch)
            rows = [(i, [p[d] for d in DESCRIPTORS["Conv"]]) for i, (_, p) in enumerate(layers)]
            native = [(i, [p[d] for d in NATIVE_CONV]) for i, (_, p) in enumerate(layers)]  # no has_bias: 0
            runs: dict[str, list] = {"blocked": [], "plain": [], "torch": []}
            for r in range(args.rounds):
                for layout in ("blocked", "plain"):
                    layout_env = {**env, "DLBENCH_ONEDNN_LAYOUT": layout}
                    stem = f"onednn_{layout}_b{batch}_{r}"
                    runs[layout].append(measure([str(ONEDNN_CONV)], native, layout_env, workdir, stem))
                torch_env = {**env, "PYTHONPATH": str(REPO)}
                runs["torch"].append(measure(torch_command, rows, torch_env, workdir, f"torch_b{batch}_{r}"))
            for i, (name, params) in enumerate(layers):
                flops, _ = operation_cost("Conv", params)
                best = {key: min(run[i].median_ms for run in found) for key, found in runs.items()}
                fastest = {key: min(run[i].min_ms for run in found) for key, found in runs.items()}
                records.append(
                    {
                        "batch": batch,
                        "layer": name,
                        "onednn_ms": best["blocked"],
                        "onednn_plain_ms": best["plain"],
                        "torch_ms": best["torch"],
                        "ratio": best["blocked"] / best["torch"],
                        "ratio_plain": best["plain"] / best["torch"],
                        "ratio_plain_of_min": fastest["plain"] / fastest["torch"],
                        "onednn_gflops": flops / best["blocked"] / 1e6,
                        "torch_gflops": flops / best["torch"] / 1e6,
                    }
                )
    table = pd.DataFrame.from_records(records)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output, index=False)
    with pd.option_context("display.width", 140, "display.max_rows", 200):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for column in ("ratio", "ratio_plain", "ratio_plain_of_min"):
        ratios = table[column].tolist()
        inside = sum(0.8 <= r <= 1.25 for r in ratios)
        print(
            f"\n{column} oneDNN/torch: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
            f"max {max(ratios):.3f}; {inside}/{len(ratios)} within [0.8, 1.25]; "
            f"threads={args.threads}, keep_heap={args.keep_heap}"
        )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
