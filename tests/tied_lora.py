"""Small models with tied and frozen parameters, shared by offload, checkpoint and DeepSpeed-call tests.

TiedLoRA has every kind of parameter the engine must handle: an embedding tied to the output head, a
frozen base linear under a LoRA adapter, and LayerNorms small enough to stay whole at stage 3.
TiedFrozen is the smallest such model: a linear "embedding" whose weight the head shares, a frozen
linear between."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine_helpers import LoRALinear

VOCAB, HIDDEN, SEQ = 64, 32, 8


class TiedLoRA(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.up = LoRALinear.new(HIDDEN, 2 * HIDDEN)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.down(F.gelu(self.up(h)))
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), ids.roll(-1, 1).reshape(-1))


class TiedFrozen(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(width, width, bias=False)
        self.frozen = torch.nn.Linear(width, width)
        self.frozen.requires_grad_(False)
        self.head = torch.nn.Linear(width, width, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.frozen(self.embed(x)))
