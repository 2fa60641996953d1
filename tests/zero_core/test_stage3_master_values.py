"""Stage 3 in bf16 keeps the fp32 master of the weights' original values, small (persistent) ones included.

The small parameters kept whole on every rank are cast into a 16-bit buffer; their master must be read
before that cast, as the partitioned ones' is. Checked through the public path: the fp32 weights of a
checkpoint saved right after `initialize` equal the model's fp32 weights, bit for bit.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _model() -> torch.nn.Module:
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.LayerNorm(24), torch.nn.Linear(24, 8))
    with torch.no_grad():
        for param in model[1].parameters():  # LayerNorm starts at ones and zeros, which bf16 holds exactly
            param.normal_()
    return model


def _save(rank: int, world_size: int, directory: str) -> None:
    import zero_core

    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 30}}
    engine, _, _, _ = zero_core.initialize(model=_model(), config=config)
    engine.save_checkpoint(directory, tag="start")
    engine.destroy()


def test_the_master_holds_every_weight_unrounded(tmp_path: Path) -> None:
    from multirank import run_ranks
    from zero_core.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    run_ranks(_save, 2, str(tmp_path), timeout=120)
    saved = get_fp32_state_dict_from_zero_checkpoint(tmp_path, tag="start")
    original = _model().state_dict()
    assert set(saved) == set(original)
    for name, value in original.items():
        # the LayerNorm and the biases (at most 30 elements) stay whole; the weights are partitioned
        assert torch.equal(saved[name].float(), value), name
        assert not torch.equal(value.bfloat16().float(), value), f"{name} would lose bits to bf16"
