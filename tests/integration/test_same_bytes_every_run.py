"""The same job gives the same bytes every run: the allocator's peak of every phase, to the byte.

A small GPT-NeoX, fully fine-tuned, on 2 gloo ranks, at stage 2 (gradients reduce-scattered during backward)
and stage 3 (parameters broadcast at initialize, gathered ahead by prefetch), with overlap_comm on, trained
two steps under `profile_engine` with zero-pin's count of the CPU allocator. Three runs, each in fresh
processes, must agree on every rank's "init" figure and forward, backward and step peaks. Before gloo's
collectives waited for gloo's worker thread to let go of their tensors (comm/_gloo.py), the copies it made and
the tensors freed right after a collective died on that thread at moments that moved with scheduling, and
these figures differed between runs (docs/ledger.md, "The same bytes every run").
"""
from __future__ import annotations

import pytest
import torch

from hf_models import gpt_neox

MODEL = {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 256, "max_position_embeddings": 64}
MICRO, SEQ, STEPS = 2, 32, 2
STAGES = (2, 3)


def _measure(rank: int, world_size: int) -> dict[int, dict[str, int]]:
    import zero_core
    from zero_core.accelerator import get_accelerator
    from zero_core.profile import hf_train_step, profile_engine

    get_accelerator().count_allocations()  # before any model: its weights are counted
    peaks = {}
    for stage in STAGES:
        model = gpt_neox(0, **MODEL).to(torch.bfloat16)
        zero = {"stage": stage, "overlap_comm": True, "reduce_bucket_size": 20_000,
                "stage3_prefetch_bucket_size": 20_000, "stage3_param_persistence_threshold": 1_000}
        config = {"train_micro_batch_size_per_gpu": MICRO, "bf16": {"enabled": True},
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": zero}
        engine, _, _, _ = zero_core.initialize(model=model, config=config)
        generator = torch.Generator().manual_seed(rank)
        batches = [torch.randint(0, MODEL["vocab_size"], (MICRO, SEQ), generator=generator) for _ in range(STEPS)]
        measured = profile_engine(engine, hf_train_step, batches)
        peaks[stage] = {phase: figures["allocator"] for phase, figures in measured.allocator.items()}
        engine.destroy()
    return peaks


@pytest.fixture(scope="module")
def three_runs() -> list[list[dict[int, dict[str, int]]]]:
    from multirank import run_ranks
    from zero_pin._native_build import COUNTING_ALLOCATOR_OP

    COUNTING_ALLOCATOR_OP.load()  # built once here (not counting: nothing is installed); the ranks load it
    return [run_ranks(_measure, 2, timeout=120) for _ in range(3)]


@pytest.mark.parametrize("stage", STAGES)
def test_three_runs_give_every_phase_the_same_allocator_peak(three_runs: list[list[dict[int, dict[str, int]]]],
                                                             stage: int) -> None:
    first, *others = three_runs
    for rank, peaks in enumerate(first):
        assert list(peaks[stage]) == ["init", "forward", "backward", "step"]
        assert all(bytes_ > 0 for bytes_ in peaks[stage].values())
        for other in others:
            assert other[rank][stage] == peaks[stage], (rank, peaks[stage], other[rank][stage])
