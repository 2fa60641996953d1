"""DeepSpeed issue #4305's DeepSpeed-Chat ds_config, as published, initializes a stage-3 engine that trains.

The config has no optimizer block (DeepSpeed-Chat passes its own Adam to initialize), fp16 with
dynamic loss scaling, `stage3_max_live_parameters` 3e7 and an activation_checkpointing block with
partition_activations, cpu_checkpointing and number_checkpoints 5. As in DeepSpeed, the block
configures zero_core.checkpointing (deepspeed.checkpointing) and turns nothing on: the layers
checkpointed through `zero_core.checkpointing.checkpoint` keep their inputs in host memory.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import torch

ISSUE_4305 = Path(__file__).parents[1] / "zero_plugins" / "configs" / "stage3_deepspeed_issue_4305.json"
HIDDEN = 64


class Checkpointed(torch.nn.Module):
    """Two blocks, each run through zero_core.checkpointing as a Megatron-style model calls it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(128, HIDDEN)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(2))
        self.head = torch.nn.Linear(HIDDEN, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from zero_core import checkpointing

        h = self.embed(ids)
        for block in self.blocks:
            h = checkpointing.checkpoint(lambda x, b=block: torch.tanh(b(x)), h)
        return self.head(h).float().pow(2).mean()


def test_the_issue_4305_config_trains_at_stage_3(solo_process_group: None) -> None:
    import zero_core
    from zero_core import checkpointing

    torch.manual_seed(0)
    model = Checkpointed()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # DeepSpeed-Chat passes its own
    config = json.loads(ISSUE_4305.read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine, _, _, _ = zero_core.initialize(model=model, optimizer=optimizer, config=config)
        assert engine.gradient_accumulation_steps() == 64, "train_batch_size 64 on one rank at micro-batch 1"
        losses = []
        for step in range(64):
            loss = engine(torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(step)))
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    assert all(math.isfinite(value) for value in losses)
    assert engine.global_steps == 1, "one optimizer step after 64 micro-steps"
    assert checkpointing.settings() == checkpointing.Settings(
        partition_activations=True, number_checkpoints=5, cpu_checkpointing=True)
    assert not any(issubclass(w.category, zero_core.LiveCapWarning) for w in caught), "every unit is under 3e7"
    engine.destroy()
    checkpointing.unconfigure()
