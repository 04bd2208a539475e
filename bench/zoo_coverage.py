"""Real networks in: the nine model-zoo CNNs the onnx package ships (batch 1 and 8) and tiny Hugging Face
transformers (BERT, GPT-2, T5 encoder, DistilBERT, ViT; dynamic batch and sequence, dims.seq=128) are
extracted; each extracted shape is held to the shape onnxruntime computes; nodes are counted by class and the
share of operator nodes (neither constant nor layout-only) each backend's registry serves is printed, with
the op types it lacks. With --measure, all nine zoo models are benchmarked in one command, twice: the second
run takes every result from the reuse store; the wall times of both are printed.

    python bench/zoo_coverage.py [--batches 1 8] [--seq 128] [--no-ort] [--measure] [--out zoo_coverage.csv]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "onnx"))

from dlbench import CONF_DIR  # noqa: E402
from dlbench.onnx.extract import extract_operations  # noqa: E402
from dlbench.onnx.rebatch import rebatched_model  # noqa: E402
from dlbench.operators.registry import load_registry  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512")  # fmt: skip
BACKENDS = ("torch", "onednn", "onnxruntime")


def load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def served(registry, op_types: set[str], backend: str) -> set[str]:
    """Op types an entry of ``backend`` is registered for (on cpu), available here or not."""
    return {t for t in op_types if registry.serving(t, backend, "cpu")}


def check_shapes(path: Path, batch: int, dims: dict[str, int], extraction) -> str:
    from ort_shapes import actual_shapes, mismatches

    try:
        model = rebatched_model(path, batch, dims)
        wrong = mismatches(extraction, model, actual_shapes(model))
    except Exception as err:  # noqa: BLE001 - onnxruntime refusing a model is a finding, not a crash
        return f"not run: {type(err).__name__}: {str(err)[:60]}"
    return "ok" if not wrong else f"{len(wrong)} WRONG: {wrong[0]}"


def coverage_rows(models: list[tuple[str, Path, int, dict[str, int]]], ort: bool) -> list[dict]:
    registry = load_registry((CONF_DIR,))
    rows = []
    for label, path, batch, dims in models:
        start = time.perf_counter()
        extraction = extract_operations(path, batch, dims=dims)
        seconds = time.perf_counter() - start
        counts = extraction.class_counts()
        operators = Counter(n.op_type for n in extraction.compute_nodes) + Counter(
            s.op_type for s in extraction.skipped
        )
        total_ops = sum(operators.values()) or 1
        row = {
            "model": label, "batch": batch, "nodes": extraction.total_nodes, "constant": counts["constant"],
            "layout": counts["layout"], "operators": total_ops, "skipped": counts["skipped"],
            "extract_s": round(seconds, 3),
        }  # fmt: skip
        for backend in BACKENDS:
            types = served(registry, set(operators), backend)
            row[f"{backend}_%"] = round(100 * sum(operators[t] for t in types) / total_ops, 1)
            if backend == "torch":
                row["torch_missing"] = " ".join(f"{t}:{n}" for t, n in operators.most_common() if t not in types)
        row["ort_shapes"] = check_shapes(path, batch, dims, extraction) if ort else "not checked"
        rows.append(row)
        print(f"  {label} bs{batch}: {row['ort_shapes']}, {seconds:.2f} s", file=sys.stderr)
    return rows


def transformer_models(seq: int, batches: list[int], folder: Path) -> list[tuple[str, Path, int, dict[str, int]]]:
    try:
        from hf_models import NAMES, export_transformer
    except ImportError as err:
        print(f"transformers not installed ({err}); pip install transformers to include them", file=sys.stderr)
        return []
    found = []
    for name in NAMES:
        path = export_transformer(name, folder / f"{name}.onnx")
        for batch in batches:
            found.append((name, path, batch, {} if name == "vit" else {"seq": seq}))
    return found


def measure_zoo(batch: int) -> None:
    """All nine zoo models in one command with the torch backend, then the same command again."""
    paths = ",".join(str(ZOO / f"light_{n}.onnx") for n in ZOO_MODELS)
    with tempfile.TemporaryDirectory(prefix="dlbench_zoo_") as scratch:
        command = [sys.executable, "-m", "dlbench", "task=benchmark_model", f"model=[{paths}]",
                   f"batch_size={batch}", "backend=torch", "threads=1", "quiet=true", "measure.warmup=1",
                   "measure.min_reps=3", "measure.min_time_s=0.01"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{scratch}/mlflow.db"}
        for attempt in ("first run (empty reuse store)", "second run (same command)"):
            print(f"\n{attempt}: {load()}")
            start = time.perf_counter()
            done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - start
            summary = [line for line in done.stdout.splitlines() if re.match(r"^(operations:|model |light_)", line)]
            print("\n".join(summary[-12:]))
            print(f"wall time {wall:.1f} s, exit status {done.returncode}; {load()}")
            if done.returncode:
                print(done.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--no-ort", action="store_true", help="skip the onnxruntime shape check")
    parser.add_argument("--measure", action="store_true", help="benchmark the nine zoo models (torch), twice")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    args = parser.parse_args()
    import pandas as pd

    print(f"start: {load()}")
    with tempfile.TemporaryDirectory(prefix="dlbench_hf_") as folder:
        models = [(n, ZOO / f"light_{n}.onnx", b, {}) for n in ZOO_MODELS for b in args.batches]
        models += transformer_models(args.seq, args.batches, Path(folder))
        table = pd.DataFrame(coverage_rows(models, not args.no_ort))
    with pd.option_context("display.max_rows", 200, "display.width", 250, "display.max_colwidth", 70):
        print(table.to_string(index=False))
    agree = int((table["ort_shapes"] == "ok").sum())
    print(f"\nshapes checked against onnxruntime: {agree} of {len(table)} extractions agree (the rest: see ort_shapes)")
    for backend in BACKENDS:
        share = table[f"{backend}_%"]
        print(f"served share of operator nodes, {backend}: min {share.min():.1f}%, median {share.median():.1f}%")
    missing = Counter()
    for text in table["torch_missing"]:
        for item in text.split():
            op_type, count = item.split(":")
            missing[op_type] += int(count)
    print("op types torch lacks (nodes over all rows): " + ", ".join(f"{t} {n}" for t, n in missing.most_common()))
    print(f"end: {load()}")
    if args.out:
        table.to_csv(args.out, index=False)
    if args.measure:
        measure_zoo(args.batches[0])


if __name__ == "__main__":
    main()
