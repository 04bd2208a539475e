"""A small GPT-like causal language model on synthetic token sequences, instrumented per batch.

Each sequence counts up from a random low token with a per-sequence stride (modulo the vocabulary), so the
next token is predictable from the context and the loss falls. Attention is written out (MatMul,
Softmax) rather than fused, so the profile and the ONNX graph show the individual operators.
"""

from __future__ import annotations

import math

import torch
from common import base_parser, export_onnx, setup, train
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise SystemExit(f"--dim ({dim}) must be a multiple of --heads ({heads})")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dim // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(seq_len, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        return self.head(self.ln(self.blocks(x)))


def synthetic_tokens(
    batches: int, batch_size: int, seq_len: int, vocab: int, device: torch.device, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Arithmetic sequences modulo ``vocab`` starting in its first sixteenth; the target is the input
    shifted by one token."""
    generator = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(batches):
        start = torch.randint(0, max(vocab // 16, 1), (batch_size, 1), generator=generator)
        stride = torch.randint(1, 4, (batch_size, 1), generator=generator)
        sequence = (start + stride * torch.arange(seq_len + 1)) % vocab
        data.append((sequence[:, :-1].to(device), sequence[:, 1:].to(device)))
    return data


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], batch_size=32, lr=0.5)
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary size")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--dim", type=int, default=64, help="model width")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    args = parser.parse_args()
    device = setup(args)
    model = TinyGPT(args.vocab, args.seq_len, args.dim, args.layers, args.heads).to(device)
    if args.export_onnx:
        example = torch.randint(0, args.vocab, (args.batch_size, args.seq_len), device=device)
        path = export_onnx(model, example, args.export_onnx, input_name="tokens", output_name="logits")
        print(f"wrote {path}")
        return
    data = synthetic_tokens(args.data_batches, args.batch_size, args.seq_len, args.vocab, device, args.seed)
    train(model, data, lm_loss, args, "transformer_lm")


if __name__ == "__main__":
    main()
