"""Multi-layer perceptron on flattened 28x28 synthetic images (10 classes), instrumented per batch.

Labels come from a fixed random teacher network, so the task is learnable and the loss falls.
"""

from __future__ import annotations

import torch
from common import base_parser, export_onnx, setup, train
from torch import nn
from torch.nn import functional as F


def make_mlp(in_features: int, hidden: int, layers: int, num_classes: int) -> nn.Sequential:
    modules: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for _ in range(layers):
        modules.extend([nn.Linear(width, hidden), nn.ReLU()])
        width = hidden
    modules.append(nn.Linear(width, num_classes))
    return nn.Sequential(*modules)


def synthetic_digits(
    batches: int, batch_size: int, device: torch.device, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """28x28 single-channel images; the label is the argmax of a fixed random two-layer teacher."""
    generator = torch.Generator().manual_seed(seed)
    w1 = torch.randn(28 * 28, 64, generator=generator) / 28
    w2 = torch.randn(64, 10, generator=generator)
    data = []
    for _ in range(batches):
        images = torch.randn(batch_size, 1, 28, 28, generator=generator)
        labels = (torch.relu(images.flatten(1) @ w1) @ w2).argmax(dim=1)
        data.append((images.to(device), labels.to(device)))
    return data


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], batch_size=32, lr=0.02)
    parser.add_argument("--hidden", type=int, default=2048, help="units per hidden layer")
    parser.add_argument("--layers", type=int, default=3, help="hidden layers")
    args = parser.parse_args()
    device = setup(args)
    model = make_mlp(28 * 28, args.hidden, args.layers, 10).to(device)
    if args.export_onnx:
        path = export_onnx(model, torch.randn(args.batch_size, 1, 28, 28, device=device), args.export_onnx)
        print(f"wrote {path}")
        return
    data = synthetic_digits(args.data_batches, args.batch_size, device, args.seed)
    train(model, data, F.cross_entropy, args, "mlp")


if __name__ == "__main__":
    main()
