"""Activation checkpointing at every stage: torch's (reentrant and not, through transformers), ours
(zero_core.checkpointing.checkpoint) and ours with `cpu_checkpointing` train a small GPT-NeoX on
2 gloo ranks in fp32 to the losses of the run without checkpointing (docs/activations.md).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_models import small_gpt_neox, train_causal_lm

STAGES = (0, 1, 2, 3)
MODES = ("none", "torch-reentrant", "torch-non-reentrant", "ours", "ours-cpu")
STEPS, BATCH, SEQ = 3, 2, 16


def ds_config(stage: int, mode: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 3000,
                              "stage3_param_persistence_threshold": 100},
    }
    if mode == "ours-cpu":
        config["activation_checkpointing"] = {"cpu_checkpointing": True}
    return config


def enable(model: Any, mode: str) -> None:
    import zero_core

    if mode.startswith("torch"):
        kwargs = {"use_reentrant": mode == "torch-reentrant"}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5: gradient_checkpointing_enable is its old name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif mode.startswith("ours"):
        model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=zero_core.checkpointing.checkpoint)


def _train_all(rank: int, world_size: int) -> dict[str, Any]:
    import warnings

    import zero_core
    from zero_core.checkpointing import unconfigure

    data = torch.randint(0, 96, (STEPS, 1, world_size, BATCH, SEQ), generator=torch.Generator().manual_seed(3))
    results = {}
    for stage in STAGES:
        for mode in MODES:
            unconfigure()
            model = small_gpt_neox(seed=0)
            model.train()
            enable(model, mode)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(stage, mode))
                losses = train_causal_lm(engine, data, rank)
            results[f"stage{stage}-{mode}"] = {
                "losses": losses,
                "configured": zero_core.checkpointing.is_configured(),
                "cpu": zero_core.checkpointing.settings().cpu_checkpointing,
                "host_peak": max(engine.ledger.peak("activations", where) for where in ("host", "host.pinned")),
                "held": [str(w.message) for w in caught if issubclass(w.category, zero_core.HeldParametersWarning)],
            }
            engine.destroy()
    unconfigure()
    return results


@pytest.fixture(scope="module")
def trained() -> list[dict[str, Any]]:
    from multirank import run_ranks

    return run_ranks(_train_all, 2, timeout=300)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("mode", MODES[1:])
def test_losses_equal_the_uncheckpointed_run(trained, stage: int, mode: str) -> None:  # type: ignore[no-untyped-def]
    for rank_result in trained:
        plain = rank_result[f"stage{stage}-none"]["losses"]
        got = rank_result[f"stage{stage}-{mode}"]["losses"]
        assert len(got) == STEPS
        torch.testing.assert_close(torch.tensor(got), torch.tensor(plain), rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("stage", STAGES)
def test_the_block_configures_cpu_checkpointing_and_moves_inputs_to_host(trained, stage: int) -> None:  # type: ignore[no-untyped-def]
    result = trained[0][f"stage{stage}-ours-cpu"]
    assert result["configured"] and result["cpu"], "initialize configures zero_core.checkpointing from the block"
    assert result["host_peak"] > 0, "the host copies of the checkpointed inputs are in the ledger"
    ours = trained[0][f"stage{stage}-ours"]
    assert not ours["configured"] and ours["host_peak"] == 0, "without the block nothing moves to host"


@pytest.mark.parametrize("mode", MODES)
def test_stage3_recomputation_raises_no_held_parameters_warning(trained, mode: str) -> None:  # type: ignore[no-untyped-def]
    assert trained[0][f"stage3-{mode}"]["held"] == []
