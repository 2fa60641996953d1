"""zero_core.Init, GatheredParameters and the stage-3 errors.

- Building a model inside `zero_core.Init` partitions each module as it is created: the
  peak memory of the build (a StorageTracker around it) stays within the largest layer
  plus the shards, far below the whole model; the model then trains exactly like one
  built normally, and `module_state_dict()` gives back the same full weights.
- `GatheredParameters(params, modifier_rank=0)` shows full weights on every rank, and
  rank 0's in-place changes reach every rank's shard (and the fp32 master).
- Init reads only the config's zero_optimization block, so the Trainer's half-filled config (scheduler
  "auto") that transformers hands it is taken, as DeepSpeed's Init takes it.
- Bad arguments fail with one line naming the problem and the fix; a live cap below what
  the running modules need is gathered past, with one warning naming the unit and the key.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

WIDTHS = [64, 128, 128, 128, 128, 128, 64]  # the largest layer is 1/5 of the model


def make_model() -> torch.nn.Sequential:
    torch.manual_seed(3)
    layers = [torch.nn.Linear(a, b) for a, b in zip(WIDTHS, WIDTHS[1:])]
    return torch.nn.Sequential(*layers)


def config(**zero: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, **zero}}


def _train(engine, rank: int) -> list[float]:  # type: ignore[no-untyped-def]
    data = torch.randn(3, 8, WIDTHS[0], generator=torch.Generator().manual_seed(0))
    losses = []
    for batch in data:
        loss = engine(batch[rank * 4 : rank * 4 + 4]).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def _run(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core
    from zero_core import StorageTracker

    with StorageTracker() as tracker:
        with zero_core.Init(config=config()):
            model = make_model()
        build_peak = tracker.peak_bytes("cpu")
    empty = all(p.numel() == 0 and p.ds_numel > 0 for p in model.parameters())
    with zero_core.GatheredParameters(model[0].bias, modifier_rank=0):  # in-place initialisation, as after post_init
        if rank == 0:
            with torch.no_grad():
                model[0].bias.fill_(0.25)
    engine, _, _, _ = zero_core.initialize(model=model, config=config())
    init_losses, init_state = _train(engine, rank), engine.module_state_dict()
    engine.destroy()

    plain = make_model()
    with torch.no_grad():
        plain[0].bias.fill_(0.25)
    engine, _, _, _ = zero_core.initialize(model=plain, config=config())
    plain_losses, plain_state = _train(engine, rank), engine.module_state_dict()
    engine.destroy()

    engine, _, _, _ = zero_core.initialize(model=make_model(), config={**config(), "bf16": {"enabled": True}})
    weight = engine.module[1].weight
    with zero_core.GatheredParameters(weight):
        seen = weight.detach().float().clone()
    with zero_core.GatheredParameters(engine.module[1].parameters(), modifier_rank=0):
        if rank == 0:
            with torch.no_grad():
                weight.fill_(2.0)
                engine.module[1].bias.fill_(2.0)
    unit = weight._zero_unit
    # the 16-bit values of the partition: at stage 3 in bf16 a cast of the master (no copy is kept)
    shard, master = unit.partition.values().float().clone(), unit.master.clone()
    after = engine.module_state_dict()
    engine.destroy()
    return {"build_peak": build_peak, "empty": empty, "init": (init_losses, init_state),
            "plain": (plain_losses, plain_state), "seen": seen, "shard": shard, "master": master, "after": after}


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    from multirank import run_ranks

    return run_ranks(_run, 2, timeout=300)


def test_init_peak_is_the_largest_layer_plus_the_shards(results) -> None:  # type: ignore[no-untyped-def]
    layers = [(a * b + b) * 4 for a, b in zip(WIDTHS, WIDTHS[1:])]  # fp32 bytes per layer
    shards = sum(-(-n // 2) for n in layers)  # each layer's shard, on 2 ranks
    for result in results:
        assert result["empty"], "every parameter is partitioned, with ds_numel set"
        assert result["build_peak"] <= max(layers) + shards
        assert result["build_peak"] < sum(layers) * 3 // 4, "no rank ever holds the whole model"


def test_init_model_trains_like_a_plain_one(results) -> None:  # type: ignore[no-untyped-def]
    for result in results:
        assert result["init"][0] == result["plain"][0]
    init_state, plain_state = results[0]["init"][1], results[0]["plain"][1]
    assert init_state.keys() == plain_state.keys() and results[1]["init"][1] == {}
    for key, value in plain_state.items():
        assert torch.equal(init_state[key], value), key


def test_gathered_parameters_reads_and_redistributes(results) -> None:  # type: ignore[no-untyped-def]
    expected = make_model()[1].weight.detach().bfloat16().float()
    for result in results:
        assert torch.equal(result["seen"], expected), "every rank sees the full weight"
        assert torch.all(result["shard"] == 2.0) and torch.equal(result["master"], result["shard"])
    assert torch.all(results[0]["after"]["1.weight"] == 2.0) and torch.all(results[0]["after"]["1.bias"] == 2.0)
    assert torch.equal(results[0]["after"]["2.weight"].float(), make_model()[2].weight.detach().bfloat16().float())


class Outer(torch.nn.Module):
    """Holds its own weight gathered while its child runs: both count against the live cap."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = torch.nn.Parameter(torch.randn(64, 64))
        self.inner = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) @ self.mix


def _trained_under_live_cap(model: torch.nn.Module, cap: int) -> tuple[Any, list[str]]:
    """The engine of `model` at stage3_max_live_parameters `cap` after two steps, and its LiveCapWarnings."""
    import warnings

    import zero_core

    engine, _, _, _ = zero_core.initialize(model=model, config=config(stage3_max_live_parameters=cap))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            engine.backward(engine(torch.randn(2, 64)).sum())
            engine.step()
    return engine, [str(w.message) for w in caught if issubclass(w.category, zero_core.LiveCapWarning)]


def test_live_cap_below_the_running_modules_gathers_past_it_and_warns(solo_process_group: None) -> None:
    engine, warned = _trained_under_live_cap(Outer(), 4160)
    assert warned == ["zero stage 3: inner needs 4160 elements gathered while 4096 are in use by the modules running "
                      "now, 8256 in all, more than zero_optimization.stage3_max_live_parameters (4160); it is gathered "
                      "beyond the cap, as DeepSpeed does. Set zero_optimization.stage3_max_live_parameters to at least "
                      "8256 to keep every gathered parameter within it"]
    assert engine.coordinator.peak_live_numel == 8256 and engine.coordinator.live_numel == 0
    engine.destroy()


def test_every_layer_above_the_live_cap_is_one_warning_counting_them(solo_process_group: None) -> None:
    """DeepSpeed-Chat's 3e7 cap at 7B is below every layer: each is gathered alone, and one line says so."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64, bias=False),
                                torch.nn.Linear(64, 32, bias=False))
    engine, warned = _trained_under_live_cap(model, 1000)
    assert warned == ["zero stage 3: 0 has 4096 elements, more than zero_optimization.stage3_max_live_parameters "
                      "(1000); it is gathered alone, as DeepSpeed does; so are the 2 other units larger than the cap on "
                      "their own, up to 1 (4096 elements), without a further warning. Set "
                      "zero_optimization.stage3_max_live_parameters to at least 4096 to keep every gathered parameter "
                      "within it"]
    assert engine.coordinator.peak_live_numel == 4096
    engine.destroy()


def test_bad_gathered_parameters_arguments(solo_process_group: None) -> None:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config())
    with pytest.raises(ZeroError, match=r"modifier_rank 1 is outside 0..0"):
        zero_core.GatheredParameters(engine.module[0].weight, modifier_rank=1)
    with pytest.raises(ZeroError, match=r"GatheredParameters takes parameters \(or None, which it skips\), got str"):
        zero_core.GatheredParameters(["weight"])
    engine.destroy()


def test_zero_estimate_counts_a_partitioned_model(solo_process_group: None) -> None:
    """zero-estimate reads DeepSpeed's ds_numel on partitioned parameters (their .data is empty)."""
    import zero_core
    from zero_estimate import model_to_params

    expected = model_to_params(make_model())
    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config())
    assert all(p.numel() == 0 for p in engine.module.parameters())
    assert model_to_params(engine.module) == expected
    engine.destroy()
    with zero_core.Init(config=config()):
        built = make_model()
    assert model_to_params(built) == expected
    late = make_model()
    zero_core.Init(module=late, config=config())  # an already-built model, partitioned at once
    assert all(p.numel() == 0 for p in late.parameters()) and model_to_params(late) == expected


def test_init_reads_only_the_zero_block_of_a_half_filled_trainer_config(solo_process_group: None,
                                                                      tmp_path: Path) -> None:
    """transformers' from_pretrained hands Init the Trainer's config before the scheduler's "auto" is filled in
    (run_clm.py with --deepspeed at stage 3): Init reads its zero_optimization block only, "auto" there as
    DeepSpeed's default, and the model is partitioned; a bad zero block is still refused."""
    import zero_core
    from zero_plugins.ds_config import ConfigError

    scheduler = {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}
    auto = {**config(stage3_param_persistence_threshold="auto"), "train_batch_size": "auto", "scheduler": scheduler}
    (tmp_path / "ds.json").write_text(json.dumps({**config(), "train_batch_size": "auto", "scheduler": scheduler}))
    # "auto": DeepSpeed's threshold, above every layer here, so each stays whole; 0 (the file): all partitioned
    for source, threshold, numels in ((auto, 100_000, [16384, 128]), (tmp_path / "ds.json", 0, [0, 0])):
        init = zero_core.Init(config_dict_or_path=source)
        with init:
            model = make_model()
        assert init.threshold == threshold
        assert [p.numel() for p in model[1].parameters()] == numels
    with pytest.raises(ConfigError, match=r"^zero_optimization.stage: must be a concrete value"):
        zero_core.Init(config_dict_or_path={"zero_optimization": {"stage": "auto"}})
