"""The parity tests' common setup: one global batch per step, split over ranks and micro-batches.

The engine runs each step on its rank's share of the global batch; plain torch, as the
reference, on the whole of it. Imported like engine_helpers.py (tests/ is on sys.path).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

STEPS = 10
GLOBAL_BATCH = 8
LR = 1e-3
CLIP = 0.05  # small enough that every step clips, so clipping is really exercised

Forward = Callable[[torch.Tensor], torch.Tensor]  # a batch of token ids -> its mean loss


def split_batch_config(case: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The ds_config keys that split GLOBAL_BATCH (and set AdamW, clipping) for a case's `accum` and `clip`."""
    accum = case.get("accum", 1)
    return {
        "train_batch_size": GLOBAL_BATCH,
        "gradient_accumulation_steps": accum,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size // accum,
        "gradient_clipping": case.get("clip", 0.0),
        "optimizer": {"type": "AdamW", "params": {"lr": LR}},
    }


def train_split(engine: Any, forward: Forward, data: Iterable[torch.Tensor], rank: int,
                world_size: int) -> Iterator[float]:
    """One engine step per global batch, this rank's micro-batches of it; yields each step's global batch loss."""
    accum = engine.gradient_accumulation_steps()
    micro = engine.train_micro_batch_size_per_gpu()
    for batch in data:
        step_loss = torch.zeros(())
        for k in range(accum):
            start = (k * world_size + rank) * micro
            loss = forward(batch[start : start + micro])
            engine.backward(loss)
            engine.step()
            step_loss += loss.detach().float() / accum
        dist.all_reduce(step_loss)
        yield step_loss.item() / world_size


def train_whole(model: torch.nn.Module, forward: Forward, optimizer: torch.optim.Optimizer,
                data: Iterable[torch.Tensor], clip: float, skip: int = 0) -> list[float]:
    """Plain torch on each whole global batch; the first `skip` steps only measure the loss. Returns the losses."""
    losses = []
    for step, batch in enumerate(data):
        loss = forward(batch)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if step >= skip:
            optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses
