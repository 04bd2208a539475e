"""A small training script with known causes of slowdown planted, for the outlier tests (tests/tasks/
test_evaluate_outliers.py): ``--cause`` names them (comma-separated), ``none`` trains a clean step.

- ``subnormal``: 30% of the input batch is subnormal (below float32's normal range), so the first layer's GEMMs
  compute on subnormals (CPUs with microcode assists pay for them; others do not);
- ``transposed``: a learned gain stored transposed and multiplied elementwise as a transposed view;
- ``float64``: a GELU computed in float64 "for stability" (a dtype leak inside a float32 model);
- ``threads``: a data-loader-like worker process that runs OpenMP-threaded torch work beside the step.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from dlbench.instrument import op_performance_analysis, report_parameters


class Planted(nn.Module):
    def __init__(self, features: int, hidden: int, batch: int, causes: set[str]) -> None:
        super().__init__()
        self.causes = causes
        self.first = nn.Linear(features, hidden)  # wide, so the gain's transposed view is far from the cache
        self.second = nn.Linear(hidden, features)
        self.head = nn.Linear(features, 10)
        # (hidden, batch): used as its transposed view, strides (1, batch), when the cause is planted
        shape = (hidden, batch) if "transposed" in causes else (batch, hidden)
        self.gain = nn.Parameter(torch.ones(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        h = F.gelu(h.double()).float() if "float64" in self.causes else F.gelu(h)
        h = h * (self.gain.t() if "transposed" in self.causes else self.gain)
        return self.head(torch.relu(self.second(h)))


def _busy_worker(threads: int, ready: Any, stop: Any) -> None:
    """What an augmentation worker with OpenMP threads of its own does to the step: takes its cores."""
    torch.set_num_threads(threads)
    a = torch.randn(512, 512)
    ready.set()
    while not stop.is_set():
        a = torch.tanh(a @ a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cause", default="none")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    causes = {c for c in args.cause.split(",") if c and c != "none"}
    torch.manual_seed(0)
    torch.set_num_threads(max(args.threads, 1))
    report_parameters(cause=args.cause, batch_size=args.batch_size, hidden=args.hidden, steps=args.steps)
    model = Planted(256, args.hidden, args.batch_size, causes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, 256)
    if "subnormal" in causes:
        x[torch.rand(x.shape) < 0.3] = 1e-40
    y = torch.randint(0, 10, (args.batch_size,))
    stop, worker = None, None
    if "threads" in causes:
        context = multiprocessing.get_context("spawn")
        ready, stop = context.Event(), context.Event()
        worker = context.Process(target=_busy_worker, args=(os.cpu_count() or 2, ready, stop), daemon=True)
        worker.start()
        ready.wait(timeout=120)  # running before the first step, as a data loader's workers are
    try:
        for batch_idx in range(args.steps):
            with op_performance_analysis(batch_idx, x, model):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
    finally:
        if worker is not None and stop is not None:
            stop.set()
            worker.join(timeout=10)


if __name__ == "__main__":
    main()
