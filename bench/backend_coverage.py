"""Which share of a real network's operators each backend serves: the nine model-zoo CNNs the onnx package
ships and Hugging Face BERT-, GPT-2-, T5-encoder-, DistilBERT- and ViT-type models built from configs (no
download; exported with a fixed batch and sequence, so every shape computation is a constant). Per model:
nodes, constant nodes (computed from weights and static shapes only), layout-only nodes, and of the rest the
share `backend=torch` serves (a torch entry with every descriptor of the operation by name; first as
extraction describes operations today, then as it will once it hands describe_known the output shapes and
constant input values, "a -> b") and the share
`backend=onnxruntime` serves (asked of the registry); with --run both also measure every such node once (each
distinct torch problem once), and "ran" counts the nodes whose measurement succeeded.

    python bench/backend_coverage.py [--run] [--models resnet50,bert] [--seq 128] [--out coverage.csv]

Constant and layout-only nodes are classified here from the graph; the extraction's own classes (issue 12,
graph side) will replace this once extraction reports them.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx  # noqa: E402

from dlbench.core.descriptors import DESCRIPTORS, operation_cost  # noqa: E402
from dlbench.core.values import Operation  # noqa: E402
from dlbench.onnx.attributes import read_attributes  # noqa: E402
from dlbench.onnx.describe import CannotDescribe, NoCanonicalForm, describe_known  # noqa: E402
from dlbench.onnx.extract import extract_operations, node_operation  # noqa: E402
from dlbench.onnx.load import light_model  # noqa: E402
from dlbench.onnx.node_spec import NodeSpecError, constant_values, element_types, node_spec  # noqa: E402
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


def constant_nodes(model: onnx.ModelProto, shapes_known: set[str]) -> set[int]:
    """Indices of nodes computed only from initializers, Constants and the shapes of statically shaped
    tensors (``shapes_known``): weights, not operators."""
    constant = {t.name for t in model.graph.initializer}
    found: set[int] = set()
    for index, node in enumerate(model.graph.node):
        inputs = [i for i in node.input if i]
        static_shape = node.op_type in ("Shape", "Size") and inputs and inputs[0] in shapes_known
        if node.op_type == "Constant" or static_shape or (inputs and all(i in constant for i in inputs)):
            constant.update(o for o in node.output if o)
            found.add(index)
    return found


def connected(op: Operation, node: onnx.NodeProto, rec: object, values: dict, opset: int) -> Operation:
    """``op`` described as extraction will describe it once it hands ``describe_known`` the node's output
    shapes and constant input values (the graph side of issue 12): Slice, Expand, Tile, Split and reductions
    with axes as an input then get canonical descriptors too."""
    if op.op_type not in DESCRIPTORS or all(d != "?" for d, _ in op.params):
        return op
    try:
        params = describe_known(
            op.op_type, rec.input_shapes, dict(read_attributes(node)[0]), opset, True,  # type: ignore[attr-defined]
            outputs=rec.output_shapes, values=[values.get(i) for i in node.input],  # type: ignore[attr-defined]
        )  # fmt: skip
    except (CannotDescribe, NoCanonicalForm):
        return op
    if params is None:
        return op
    flops, moved = operation_cost(op.op_type, dict(params))
    return dataclasses.replace(op, params=params, flops=flops, bytes_moved=moved)


def operations_with_nodes(path: Path, batch: int, connect: bool = False) -> tuple[list[tuple[int, Operation]], object]:
    extraction = extract_operations(path, batch)
    model = onnx.load(path)
    light, _ = light_model(model)
    types, values = element_types(light), constant_values(model.graph)
    opsets = {o.domain or "": o.version for o in model.opset_import}
    operations = []
    for i, rec in enumerate(extraction.nodes):
        try:
            spec = node_spec(model.graph.node[rec.index], opsets, rec.input_shapes, rec.output_shapes, types,
                             rec.constant, values)  # fmt: skip
        except NodeSpecError:
            spec = None
        op = dataclasses.replace(node_operation(i, rec), node=spec)
        if connect:
            op = connected(op, model.graph.node[rec.index], rec, values, extraction.opset)  # type: ignore[attr-defined]
        operations.append((rec.index, op))
    return operations, extraction


def coverage(path: Path, batch: int, run: bool, workdir: Path) -> dict[str, object]:
    started = time.perf_counter()
    model = onnx.load(path)
    operations, extraction = operations_with_nodes(path, batch)
    linked = dict(operations_with_nodes(path, batch, connect=True)[0])
    records = {rec.index: rec for rec in extraction.nodes}  # type: ignore[attr-defined]
    static = {
        name
        for rec in records.values()
        for name, shape in zip(model.graph.node[rec.index].output, rec.output_shapes, strict=True)
        if shape is not None
    } | {v.name for v in model.graph.input}
    constants = constant_nodes(model, static)
    layout = {i for i, n in enumerate(model.graph.node) if n.op_type in LAYOUT_ONLY} - constants
    compute = [i for i in range(len(model.graph.node)) if i not in constants and i not in layout]
    registry = load_registry()
    by_index = dict(operations)

    def torch_entry(op: Operation | None) -> OperatorBenchmark | None:
        if op is None:
            return None
        named = op.param_dict
        entries = registry.serving(op.op_type, "torch", "cpu")
        return next((e for e in entries if e.available and all(d in named for d in e.param_descr)), None)

    torch_served_now = [i for i in compute if torch_entry(by_index.get(i)) is not None]
    by_index = linked  # from here on, as extraction will describe the operations
    torch_served = [i for i in compute if torch_entry(by_index.get(i)) is not None]
    ort_entries = registry.serving("AnyOp", "onnxruntime", "cpu")
    ort_served = [i for i in compute if i in by_index and ort_entries]
    ran = torch_ran = None
    if run and ort_entries:
        settings = RunSettings(warmup=0, min_reps=1, max_reps=1, min_time_s=0.0, threads=1, timeout_s=3600)
        ops = [by_index[i] for i in compute if i in by_index]
        result, _ = measure_operations(ort_entries[0], ops, settings, workdir / path.stem)
        ok = {op.id for op in ops if result.measurements[op.id].ok}
        ran = [i for i in compute if i in by_index and by_index[i].id in ok]
        # torch: each distinct problem once per entry
        groups: dict[str, dict[tuple, Operation]] = {}
        for i in torch_served:
            op = by_index[i]
            groups.setdefault(torch_entry(op).name, {}).setdefault(op.params, op)  # type: ignore[union-attr]
        torch_ok: set[tuple[str, tuple]] = set()
        for name, distinct in groups.items():
            result, _ = measure_operations(registry.operator(name), list(distinct.values()), settings, workdir / name)
            torch_ok |= {(name, p) for p, op in distinct.items() if result.measurements[op.id].ok}
        torch_ran = [i for i in torch_served if (torch_entry(by_index[i]).name, by_index[i].params) in torch_ok]  # type: ignore[union-attr]
    missing = Counter(model.graph.node[i].op_type for i in compute if i not in torch_served)
    share = (lambda xs: 100.0 * len(xs) / len(compute)) if compute else (lambda xs: 100.0)
    return {
        "model": path.stem,
        "nodes": len(model.graph.node),
        "constant": len(constants),
        "layout_only": len(layout),
        "compute": len(compute),
        "torch_pct_extraction_now": share(torch_served_now),
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
            shares = (
                f"torch {row['torch_pct_extraction_now']:5.1f}% -> {row['torch_pct']:5.1f}%{torch_ran}  "
                f"onnxruntime {row['onnxruntime_pct']:5.1f}%{ran}"
            )
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
