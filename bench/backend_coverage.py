"""Which share of a real network's operators each backend serves: the nine model-zoo CNNs the onnx package
ships and Hugging Face BERT-, GPT-2-, T5-encoder-, DistilBERT- and ViT-type models built from configs (no
download; exported with a fixed batch and sequence, so every shape computation is a constant). Per model:
nodes, constant nodes (computed from weights and static shapes only), layout-only nodes (both as extraction
classifies them), and of the rest the share `backend=torch` serves (a torch entry with every descriptor of
the operation by name) and the share `backend=onnxruntime` serves (asked of the registry); with --run both
also measure every such node once (each distinct torch problem once), and "ran" counts the nodes whose
measurement succeeded.

    python bench/backend_coverage.py [--run] [--models resnet50,bert] [--seq 128] [--out coverage.csv]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx  # noqa: E402

from dlbench.core.values import Operation  # noqa: E402
from dlbench.onnx.extract import extract_operations  # noqa: E402
from dlbench.operators.registry import OperatorBenchmark, load_registry  # noqa: E402
from dlbench.operators.runner import RunSettings, measure_operations  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]  # fmt: skip
HF_MODELS = ["bert", "gpt2", "t5_encoder", "distilbert", "vit"]
LAYOUT_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Identity", "Dropout", "Constant"}


def export_hf(name: str, seq: int, folder: Path) -> Path:
    """A small model of the family (2 layers, BERT-like widths) exported with batch 1 and ``seq`` tokens."""
    import torch
    import transformers as hf

    configs = {
        "bert": (hf.BertModel, hf.BertConfig(num_hidden_layers=2)),
        "gpt2": (hf.GPT2Model, hf.GPT2Config(n_layer=2)),
        "t5_encoder": (hf.T5EncoderModel, hf.T5Config(num_layers=2)),
        "distilbert": (hf.DistilBertModel, hf.DistilBertConfig(n_layers=2)),
        "vit": (hf.ViTModel, hf.ViTConfig(num_hidden_layers=2)),
    }
    cls, config = configs[name]
    inner = cls(config).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x).last_hidden_state

    args = (torch.randn(1, 3, 224, 224),) if name == "vit" else (torch.randint(0, 1000, (1, seq)),)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden().eval(), args, str(path), dynamo=False, opset_version=17)
    return path


def coverage(path: Path, batch: int, run: bool, workdir: Path) -> dict[str, object]:
    """The model's node classes as extraction sees them, and the share of its operator nodes each backend
    serves (torch: an entry with every descriptor of the operation by name; onnxruntime: asked of the
    registry); with ``run``, the share whose measurement succeeded (each distinct torch problem once)."""
    started = time.perf_counter()
    extraction = extract_operations(path, batch)
    operations = extraction.operations()
    registry = load_registry()

    def torch_entry(op: Operation) -> OperatorBenchmark | None:
        named = op.param_dict
        entries = registry.serving(op.op_type, "torch", "cpu")
        return next((e for e in entries if e.available and all(d in named for d in e.param_descr)), None)

    torch_served = [op for op in operations if torch_entry(op) is not None]
    ort_entries = registry.serving("AnyOp", "onnxruntime", "cpu")
    ort_served = operations if ort_entries else []
    ran = torch_ran = None
    if run and ort_entries:
        settings = RunSettings(warmup=0, min_reps=1, max_reps=1, min_time_s=0.0, threads=1, timeout_s=3600)
        result, _ = measure_operations(ort_entries[0], operations, settings, workdir / path.stem)
        ran = [op for op in operations if result.measurements[op.id].ok]
        groups: dict[str, dict[tuple, Operation]] = {}
        for op in torch_served:
            groups.setdefault(torch_entry(op).name, {}).setdefault(op.params, op)  # type: ignore[union-attr]
        torch_ok: set[tuple[str, tuple]] = set()
        for name, distinct in groups.items():
            result, _ = measure_operations(registry.operator(name), list(distinct.values()), settings, workdir / name)
            torch_ok |= {(name, p) for p, op in distinct.items() if result.measurements[op.id].ok}
        torch_ran = [op for op in torch_served if (torch_entry(op).name, op.params) in torch_ok]  # type: ignore[union-attr]
    missing = Counter(op.op_type for op in operations if torch_entry(op) is None)
    share = (lambda xs: 100.0 * len(xs) / len(operations)) if operations else (lambda xs: 100.0)
    return {
        "model": path.stem,
        "nodes": extraction.total_nodes,
        "constant": extraction.constant_nodes,
        "layout_only": len(extraction.layout_nodes),
        "compute": len(operations),
        "torch_pct": share(torch_served),
        "onnxruntime_pct": share(ort_served),
        "onnxruntime_ran_pct": None if ran is None else share(ran),
        "torch_ran_pct": None if torch_ran is None else share(torch_ran),
        "torch_unserved": ", ".join(f"{t} {n}" for t, n in missing.most_common()),
        "seconds": time.perf_counter() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="also run every compute node with onnxruntime")
    parser.add_argument("--models", default=",".join(ZOO_MODELS + HF_MODELS))
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"load: {load}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.models.split(","):
            if name in ZOO_MODELS:
                path = ZOO / f"light_{name}.onnx"
            else:
                try:
                    path = export_hf(name, args.seq, folder)
                except ImportError:
                    print(f"{name}: transformers is not installed; skipped")
                    continue
            row = coverage(path, 1, args.run, folder)
            rows.append(row)
            ran = "" if row["onnxruntime_ran_pct"] is None else f" ran {row['onnxruntime_ran_pct']:5.1f}%"
            torch_ran = "" if row["torch_ran_pct"] is None else f" ran {row['torch_ran_pct']:5.1f}%"
            counts = f"nodes {row['nodes']:5d} constant {row['constant']:4d} layout {row['layout_only']:4d}"
            shares = f"torch {row['torch_pct']:5.1f}%{torch_ran}  onnxruntime {row['onnxruntime_pct']:5.1f}%{ran}"
            print(
                f"{row['model']:22s} {counts} compute {row['compute']:4d}  {shares}  ({row['seconds']:.0f} s)  "
                f"torch misses: {row['torch_unserved'] or '-'}",
                flush=True,
            )
    if args.out:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True, check=False).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
