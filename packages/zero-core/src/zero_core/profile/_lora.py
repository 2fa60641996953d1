"""LoRA for `zero profile --lora-rank`: the base model frozen, low-rank adapters on the linear layers of
the transformer blocks (PEFT's "all-linear": every linear layer inside a block, not the LM head).

An adapted layer of (in, out) features gains lora_A (rank x in, trainable) and lora_B (out x rank,
zeros, trainable), and computes base(x) + lora_B(lora_A(x)), as PEFT does (without its scaling, which
changes no memory).
"""
from __future__ import annotations

import torch


class LoraAdapted(torch.nn.Module):
    """A frozen linear layer (torch's Linear, or transformers' GPT-2 Conv1D) with a LoRA adapter."""

    def __init__(self, base: torch.nn.Module, features: tuple[int, int], rank: int) -> None:
        super().__init__()
        n_in, n_out = features
        self.base = base
        weight = next(base.parameters())
        self.lora_A = torch.nn.Linear(n_in, rank, bias=False, dtype=weight.dtype, device=weight.device)
        self.lora_B = torch.nn.Linear(rank, n_out, bias=False, dtype=weight.dtype, device=weight.device)
        torch.nn.init.zeros_(self.lora_B.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        adapted: torch.Tensor = self.base(x) + self.lora_B(self.lora_A(x))
        return adapted


def apply_lora(model: torch.nn.Module, rank: int) -> int:
    """Freeze `model` and adapt every linear layer inside its transformer blocks; returns how many."""
    if rank < 1:
        raise ValueError(f"--lora-rank must be at least 1 (got {rank})")
    model.requires_grad_(False)
    targets = [(name, module, features) for name, module in model.named_modules()
               if _in_block(name) and (features := _features(module)) is not None]
    if not targets:
        raise ValueError(f"{type(model).__name__} has no linear layer inside a block (a ModuleList) to adapt")
    for name, module, features in targets:
        if rank > min(features):
            raise ValueError(f"--lora-rank {rank} is larger than {name}'s {min(features)} features; "
                             f"pass at most {min(features)}")
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, LoraAdapted(module, features, rank))
    return len(targets)


def _in_block(name: str) -> bool:
    return any(part.isdigit() for part in name.split("."))  # under a ModuleList's numbered member


def _features(module: torch.nn.Module) -> tuple[int, int] | None:
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and hasattr(module, "nx") and hasattr(module, "nf"):
        nx, nf = getattr(module, "nx"), getattr(module, "nf")
        return int(nx), int(nf)  # GPT-2's projections: a linear layer with a transposed weight
    return None
