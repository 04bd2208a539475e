"""A training script unlike ours: a GPT-style language model trained the way nanoGPT-like scripts do it, not
the way the shipped benchmarks do (``bench/prediction_error.py`` predicts it). Used in development, as the
MobileNet-style script beside it: its figures are development figures, not held-out ones.

Unlike ``TrainingBenchmarks/transformer_lm.py``: no shared helpers, AdamW with weight decay on the matrices
only (two parameter groups), gradient-norm clipping, ``zero_grad(set_to_none=True)``, a head tied to the token
embedding, bias-free projections, a separate query/key/value projection each, an additive causal mask kept as
a buffer, scores scaled by multiplication, the tanh form of GELU, and the loss over the flattened logits with
``ignore_index``. Synthetic tokens of the real shapes (no data set).
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.instrument import op_performance_analysis


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, 1.0 / math.sqrt(dim // heads)
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        mask = torch.full((context, context), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, d // h).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        weights = F.softmax((q @ k.transpose(-1, -2)) * self.scale + self.mask[:t, :t], dim=-1)
        return self.out((weights @ v).permute(0, 2, 1, 3).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, context: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = Attention(dim, heads, context)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(1, context, dim))
        self.layers = nn.ModuleList(Layer(dim, heads, context) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.norm(x) @ self.embed.weight.t()  # the head tied to the embedding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--context", type=int, default=96)
    parser.add_argument("--dim", type=int, default=96)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    model = GPT(args.vocab, args.context, args.dim, args.layers, args.heads)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95),
    )  # fmt: skip
    tokens = torch.randint(0, args.vocab, (args.batch_size, args.context + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    targets[:, :4] = -1  # no loss on the first tokens of every sequence
    for step in range(args.steps):
        with op_performance_analysis(step, inputs, model, False):
            optimizer.zero_grad(set_to_none=True)
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    print(f"gpt_adamw: {args.steps} steps, last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
