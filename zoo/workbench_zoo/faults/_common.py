"""Small pieces the fault scripts share: a tiny model, a batch, and a gradient all-reduce done by hand."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def tiny_mlp(width: int = 64, inp: int = 32, seed: int = 0) -> torch.nn.Module:
    """A 3-layer MLP, the same weights on every rank."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(inp, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                               torch.nn.GELU(), torch.nn.Linear(width, 1))


class SeqModel(torch.nn.Module):
    """A tiny sequence model: embedding-free, (batch, seq, dim) → per-sequence score (mean over the sequence)."""

    def __init__(self, dim: int = 32, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(x)).mean(1))


def batch(n: int, inp: int = 32, gen: torch.Generator | None = None, device: Any = "cpu"
          ) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, inp, generator=gen)
    y = torch.randn(n, 1, generator=gen)
    return x.to(device), y.to(device)


def all_reduce_grads(model: torch.nn.Module) -> None:
    """Average the gradients over the ranks with one blocking all-reduce of a flat buffer."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads or not dist.is_initialized():
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
