"""ResNet-18-style network on CIFAR-10-shaped synthetic data (3x32x32, 10 classes), instrumented per batch.

Labels come from a fixed random teacher over the inputs, so the task is learnable and the loss falls.
``--width 64`` is the original ResNet-18 width; the default 16 keeps a step near 0.1 s on two cores.
"""

from __future__ import annotations

import torch
from common import base_parser, export_onnx, setup, train
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """ResNet-18 layout for 32x32 inputs: 3x3 stem, four stages of two basic blocks, global pooling."""

    def __init__(self, width: int = 16, blocks: tuple[int, ...] = (2, 2, 2, 2), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        layers = []
        in_channels = width
        for stage, count in enumerate(blocks):
            channels = width * 2**stage
            for i in range(count):
                layers.append(BasicBlock(in_channels, channels, 2 if stage > 0 and i == 0 else 1))
                in_channels = channels
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.layers(self.stem(x)))
        return self.fc(torch.flatten(out, 1))


def synthetic_cifar(
    batches: int, batch_size: int, device: torch.device, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Images of the CIFAR-10 shape; the label is the class a fixed random linear teacher prefers on the
    4x4-pooled image, so it depends on the input and can be learnt."""
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(3 * 8 * 8, 10, generator=generator)
    data = []
    for _ in range(batches):
        images = torch.randn(batch_size, 3, 32, 32, generator=generator)
        labels = (F.avg_pool2d(images, 4).flatten(1) @ teacher).argmax(dim=1)
        data.append((images.to(device), labels.to(device)))
    return data


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], batch_size=32, lr=0.05)
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage (64: ResNet-18)")
    args = parser.parse_args()
    device = setup(args)
    model = ResNetCifar(width=args.width).to(device)
    if args.export_onnx:
        path = export_onnx(model, torch.randn(args.batch_size, 3, 32, 32, device=device), args.export_onnx)
        print(f"wrote {path}")
        return
    data = synthetic_cifar(args.data_batches, args.batch_size, device, args.seed)
    train(model, data, F.cross_entropy, args, "resnet_cifar")


if __name__ == "__main__":
    main()
