"""How long ONNX extraction takes: a ResNet-50 and a 12-layer transformer encoder exported from plain torch,
and the time of encoders of 2..12 layers (BERT-base width) and of narrow encoders of 12..96 layers against
their node count (extraction should grow linearly).

    python bench/extract_speed.py [--repeats 3] [--batch-size 32] [--out extract_speed.csv]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlbench.onnx.extract import extract_operations  # noqa: E402
from dlbench.onnx.load import load_model
from dlbench.onnx.opdb import deduplicate  # noqa: E402


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers, channels = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(channels, width, stride if i == 0 else 1))
                channels = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def encoder(layers: int, d_model: int = 768, heads: int = 12, hidden: int = 3072) -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model, heads, hidden, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    # the layers are deep copies; distinct weights keep the exporter from sharing them between layers
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02)
    return model


def export(module: nn.Module, example: torch.Tensor, path: Path, training: bool) -> tuple[Path, float]:
    module.eval()
    kwargs = {"training": torch.onnx.TrainingMode.TRAINING} if training else {}
    start = time.perf_counter()
    # autograd stays on: under no_grad torch takes the fused encoder fast path, which ONNX cannot export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            dynamo=False,
            **kwargs,
        )
    return path, time.perf_counter() - start


@dataclass(frozen=True)
class Timing:
    """Seconds of extract + deduplicate over the repeats: wall-clock median and minimum, and the minimum
    CPU time of this process (the least disturbed by other work on a shared machine); the same minimum
    CPU time for reading, hashing and parsing the file alone."""

    median_s: float
    min_s: float
    cpu_min_s: float
    load_cpu_min_s: float
    nodes: int
    extracted: int
    unique: int


def time_extraction(path: Path, batch_size: int, repeats: int) -> Timing:
    walls, cpus, loads = [], [], []
    for _ in range(repeats):
        cpu = time.process_time()
        load_model(path)
        loads.append(time.process_time() - cpu)
        start, cpu = time.perf_counter(), time.process_time()
        extraction = extract_operations(path, batch_size)
        unique = deduplicate(extraction.operations())
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    if extraction.skipped:
        print(f"  warning: {len(extraction.skipped)} nodes skipped, e.g. {extraction.skipped[0].reason}")
    return Timing(
        statistics.median(walls),
        min(walls),
        min(cpus),
        min(loads),
        extraction.total_nodes,
        len(extraction.nodes),
        len(unique),
    )


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Slope, intercept and R^2 of the least-squares line."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = mean_y - slope * mean_x
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    return slope, intercept, 1.0 - ss_res / ss_tot if ss_tot else 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128, help="sequence length of the encoder input")
    parser.add_argument("--layers", type=int, nargs="*", default=[2, 4, 8, 12])
    parser.add_argument(
        "--narrow-layers",
        type=int,
        nargs="*",
        default=[12, 24, 48, 96],
        help="layer counts of narrow encoders (d_model 64), whose weights are too small to matter: the time "
        "per node of the graph work alone",
    )
    parser.add_argument("--out", type=Path, default=None, help="CSV of the figures")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # the first extraction pays for importing onnx/onnxruntime; not part of any figure
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlbench_extract_speed_") as tmp:
        directory = Path(tmp)
        path, export_s = export(ResNet50(), torch.randn(1, 3, 224, 224), directory / "resnet50.onnx", True)
        extract_operations(path, args.batch_size)
        rows.append(
            ("resnet50", 0, path.stat().st_size / 1e6, export_s, time_extraction(path, args.batch_size, args.repeats))
        )
        path.unlink()
        for layers in args.layers:
            example = torch.randn(1, args.seq, 768)
            path, export_s = export(encoder(layers), example, directory / f"encoder{layers}.onnx", False)
            timing = time_extraction(path, args.batch_size, args.repeats)
            rows.append((f"encoder{layers}", layers, path.stat().st_size / 1e6, export_s, timing))
            path.unlink()
        for layers in args.narrow_layers:
            example = torch.randn(1, 16, 64)
            model = encoder(layers, d_model=64, heads=4, hidden=256)
            path, export_s = export(model, example, directory / f"narrow{layers}.onnx", False)
            timing = time_extraction(path, args.batch_size, args.repeats)
            rows.append((f"narrow{layers}", layers, path.stat().st_size / 1e6, export_s, timing))
            path.unlink()

    header = ("model", "layers", "file_MB", "export_s", *(f.name for f in fields(Timing)))
    table = [(name, layers, size, export_s, *astuple(t)) for name, layers, size, export_s, t in rows]
    print(
        f"batch_size={args.batch_size}, {args.repeats} extractions each (extract + deduplicate); "
        "load_cpu_min_s: reading, hashing and parsing the file alone"
    )
    print("  ".join(f"{h:>14}" for h in header))
    for row in table:
        print("  ".join(f"{v:>14.3f}" if isinstance(v, float) else f"{v:>14}" for v in row))
    for family in ("encoder", "narrow"):
        members = [t for name, layers, _, _, t in rows if layers > 0 and name.startswith(family)]
        if len(members) < 2:
            continue
        nodes = [float(t.nodes) for t in members]
        series = {
            "wall median": [t.median_s for t in members],
            "CPU min": [t.cpu_min_s for t in members],
            "CPU min without the file load": [t.cpu_min_s - t.load_cpu_min_s for t in members],
        }
        for label, seconds in series.items():
            slope, intercept, r2 = linear_fit(nodes, seconds)
            print(f"{family}s, {label} vs nodes: {slope * 1e3:.3f} ms/node + {intercept:.3f} s, R^2 = {r2:.4f}")
    if args.out:
        import csv

        with args.out.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
