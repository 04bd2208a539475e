"""A training script unlike ours: a MobileNet-style CNN trained for multi-label tagging (``bench/prediction_error.py``
predicts it). Not held out: it was used in development to fix the GELU and Clip rules, so its figures are
development figures.

Unlike ``TrainingBenchmarks/resnet_cifar.py``: no shared helpers, depthwise-separable convolutions (grouped
3x3 then 1x1), ReLU6, a strided stem, global average pooling by ``mean``, dropout before the classifier, a
binary cross-entropy-with-logits loss over 20 independent labels, and RMSprop with momentum and weight decay.
Synthetic 3x64x64 images and label vectors (no data set).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from dlbench.instrument import op_performance_analysis


def separable(inp: int, out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), nn.BatchNorm2d(inp), nn.ReLU6(inplace=True),
        nn.Conv2d(inp, out, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU6(inplace=True),
    )  # fmt: skip


class Tagger(nn.Module):
    def __init__(self, labels: int, width: int) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU6(inplace=True))
        self.body = nn.Sequential(
            separable(w, 2 * w, 1), separable(2 * w, 4 * w, 2), separable(4 * w, 4 * w, 1),
            separable(4 * w, 8 * w, 2), separable(8 * w, 8 * w, 1), separable(8 * w, 16 * w, 2),
        )  # fmt: skip
        self.drop = nn.Dropout(0.2)
        self.classifier = nn.Linear(16 * w, labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(self.stem(x)).mean(dim=(2, 3))
        return self.classifier(self.drop(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--labels", type=int, default=20)
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(2)

    model = Tagger(args.labels, args.width)
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-5)
    images = torch.randn(args.batch_size, 3, 64, 64)
    labels = (torch.rand(args.batch_size, args.labels) < 0.15).float()
    model.train()
    for step in range(args.steps):
        with op_performance_analysis(step, images, model, False):
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
    print(f"cnn_multilabel: {args.steps} steps, last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
