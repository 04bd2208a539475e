"""Small real networks in plain torch, exported to ONNX with a dynamic batch dimension, for extraction tests."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with BN; a 1x1 strided projection when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """Stem conv 7x7/2 + maxpool 3x3/2, three stages of two basic blocks (16, 32, 64 channels), global
    average pool and a linear classifier. 32x32 input: stem 16x16, pool 8x8, stages 8, 4, 2."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks = []
        channels = 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.blocks(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.head(x)


class MLP(nn.Module):
    """784 -> 256 -> 128 -> 10 with ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class EncoderLayer(nn.Module):
    """One post-norm transformer encoder layer with hand-written multi-head attention (d_model 64, 4 heads,
    feed-forward 256), so the exported graph is the same whatever torch's fast paths do."""

    def __init__(self, d_model: int = 64, heads: int = 4, hidden: int = 256) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, hidden)
        self.ff2 = nn.Linear(hidden, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.heads
        q, k, v = self.qkv(x).split(d_model, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = torch.softmax(q @ k.transpose(-2, -1) / head_dim**0.5, dim=-1)
        attended = (scores @ v).transpose(1, 2).reshape(batch, seq, d_model)
        x = self.norm1(x + self.out(attended))
        return self.norm2(x + self.ff2(torch.relu(self.ff1(x))))


class TorchEncoderLayer(nn.Module):
    """torch's own nn.TransformerEncoderLayer (d_model 64, 4 heads, feed-forward 128): its ONNX export slices
    and reshapes shape values that ONNX's data propagation cannot follow."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def export(
    module: nn.Module,
    example: torch.Tensor,
    path: Path,
    dynamic_batch: bool = True,
    dynamo: bool = False,
    training: bool = False,
) -> Path:
    """Export ``module`` (in eval mode) with input ``x`` and output ``y``; the batch dimension is dynamic
    unless ``dynamic_batch`` is False. The TorchScript exporter is the default here because it takes
    ~0.1 s where the dynamo exporter takes seconds; ``dynamo=True`` exercises the newer one. ``training``
    exports in training mode, which keeps BatchNormalization nodes (eval export folds them into Conv)."""
    module.eval()
    kwargs: dict = {"input_names": ["x"], "output_names": ["y"], "dynamo": dynamo}
    if training and not dynamo:
        kwargs["training"] = torch.onnx.TrainingMode.TRAINING
    if dynamic_batch:
        if dynamo:
            kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch")},)
        else:
            kwargs["dynamic_axes"] = {"x": {0: "batch"}, "y": {0: "batch"}}
    # autograd stays on: under no_grad torch takes fused fast paths (e.g. the encoder layer's) that ONNX
    # cannot export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), **kwargs)
    return path


#: name -> (module factory, example input at batch 2, export in training mode)
MODELS = {
    "resnet": (SmallResNet, lambda: torch.randn(2, 3, 32, 32), True),
    "mlp": (MLP, lambda: torch.randn(2, 784), False),
    "encoder": (EncoderLayer, lambda: torch.randn(2, 16, 64), False),
    "torch_encoder": (TorchEncoderLayer, lambda: torch.randn(2, 16, 64), False),
}


def export_model(name: str, directory: Path, dynamic_batch: bool = True, dynamo: bool = False) -> Path:
    torch.manual_seed(0)
    factory, example, training = MODELS[name]
    suffix = ("" if dynamic_batch else "_fixed") + ("_dynamo" if dynamo else "")
    path = directory / f"{name}{suffix}.onnx"
    return export(factory(), example(), path, dynamic_batch, dynamo, training)


_EXPORTED: dict[tuple[str, bool, bool], Path] = {}
_DIRECTORY: list[Path] = []


def exported(name: str, dynamic_batch: bool = True, dynamo: bool = False) -> Path:
    """The model exported once per test session (a temporary folder removed at exit), shared by every
    test module that needs it."""
    key = (name, dynamic_batch, dynamo)
    if key not in _EXPORTED:
        if not _DIRECTORY:
            _DIRECTORY.append(Path(tempfile.mkdtemp(prefix="dlbench_onnx_")))
            atexit.register(shutil.rmtree, _DIRECTORY[0], True)
        _EXPORTED[key] = export_model(name, _DIRECTORY[0], dynamic_batch, dynamo)
    return _EXPORTED[key]
