"""Models and memory helpers shared by the engine tests (stages 0-2 and 3).

Imported at the top of test modules that need torch (never by conftest.py: zero-cli and
zero-estimate are tested without torch); tests/ is on sys.path as for multirank.py.
"""
from __future__ import annotations

import time
from typing import Any

import torch

MEMORY_MODEL_INPUTS = {"dense": 32, "lora": 64}  # in_features of memory_model(kind)


class LoRALinear(torch.nn.Module):
    """A frozen base linear with trainable low-rank adapters beside it."""

    def __init__(self, features_in: int, features_out: int, rank: int = 4) -> None:
        super().__init__()
        self.base = torch.nn.Linear(features_in, features_out)
        self.base.requires_grad_(False)
        self.lora_a = torch.nn.Linear(features_in, rank, bias=False)
        self.lora_b = torch.nn.Linear(rank, features_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(x))


def memory_model(kind: str) -> torch.nn.Module:
    """"dense": a small MLP; "lora": LoRA adapters on frozen 64x64 bases. Sizes are multiples of 4 (no padding)."""
    torch.manual_seed(0)
    if kind == "dense":
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 16))
    return torch.nn.Sequential(LoRALinear(64, 64), torch.nn.ReLU(), LoRALinear(64, 64), torch.nn.ReLU(),
                               LoRALinear(64, 64))


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, frozen) elements."""
    return (sum(p.numel() for p in model.parameters() if p.requires_grad),
            sum(p.numel() for p in model.parameters() if not p.requires_grad))


def wait_until_freed(engine: Any, categories: tuple[str, ...], timeout: float = 10.0) -> None:
    """Wait until the buffers the engine freed in these ledger categories are really gone.

    gloo's worker thread drops its reference to a communicated tensor a moment after the
    collective has completed, so its storage dies shortly after the engine lets go of it. With
    a model this small the next backward could allocate before that and the peaks would
    count both; real models spend far longer in forward.
    """
    deadline = time.monotonic() + timeout
    while any(engine.ledger.current(c) for c in categories):
        assert time.monotonic() < deadline, f"{', '.join(categories)} still alive long after the engine freed them"
        time.sleep(0.001)
