"""`engine.offload_states()` / `reload_states()` (engine/_state_moves.py), DeepSpeed's calls for RLHF loops.

On the CPU accelerator the state is already in host memory, so the engine moves nothing and the ledger is
unchanged, but the contract holds: training calls and checkpoints are refused until `reload_states()`, a
forward still runs unless the weights (`lp_params`) are away. The moving itself (what a CUDA engine does) is
checked on CPU storages by telling the mover that CPU is the accelerator: every byte the ledger counts under the
chosen states sits at `host` while away, every view reads the same values after the reload, and training goes
on exactly as without the round trip, at stages 0-3 on 2 ranks. The CUDA path itself is untested here.
"""
from __future__ import annotations

import enum
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from multirank import run_ranks

WORLD_SIZE = 2
STAGES = (0, 1, 2, 3)
CATEGORIES = ("param.persistent", "param.partition", "optim.master", "optim.state")


def _config(stage: int, precision: str = "bf16") -> dict[str, Any]:
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
                              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    return config


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _train(engine: Any, rank: int, steps: int, start: int = 0) -> list[float]:
    losses = []
    for step in range(start, start + steps):
        generator = torch.Generator().manual_seed(100 * step + rank)
        loss = engine(torch.randn(2, 4, generator=generator).to(engine.compute_dtype)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def test_the_mover_empties_storages_counts_them_at_host_and_restores_every_view() -> None:
    from zero_core.engine._state_moves import OffloadStateType, StateMover
    from zero_core.memory import MemoryLedger

    ledger = MemoryLedger()
    master = ledger.register(torch.arange(12.0), "optim.master")
    state = ledger.register(torch.full((6,), 3.0), "optim.state")
    view = master[4:8].view(2, 2)
    states = {kind: [] for kind in OffloadStateType} | {OffloadStateType.HP_PARAMS: [master, view],
                                                        OffloadStateType.OPTIM_STATES: [state]}
    mover = StateMover(ledger, moves_from="cpu")
    moved = mover.offload(states, frozenset({OffloadStateType.HP_PARAMS}), pin_memory=False, non_blocking=False)
    assert moved == 48 and master.untyped_storage().nbytes() == 0, "the view shares the storage: moved once"
    assert (ledger.current("optim.master", "cpu"), ledger.current("optim.master", "host")) == (0, 48)
    assert ledger.current("optim.state", "cpu") == 24, "a state not included stays"
    assert mover.away == {OffloadStateType.HP_PARAMS}
    assert mover.reload(non_blocking=False) == 48
    assert torch.equal(view, torch.tensor([[4.0, 5.0], [6.0, 7.0]])) and torch.equal(master, torch.arange(12.0))
    assert (ledger.current("optim.master", "cpu"), ledger.current("optim.master", "host")) == (48, 0)
    assert mover.away == frozenset()


def test_state_names_are_deepspeeds_and_an_unknown_one_lists_them() -> None:
    from zero_core.engine._state_moves import OffloadStateType, offload_state_types

    class DeepSpeedsEnum(str, enum.Enum):  # DeepSpeed's OffloadStateTypeEnum is a str enum with these values
        optim_states = "optim_states"

    assert offload_state_types([DeepSpeedsEnum.optim_states, "lp_grads"]) == {
        OffloadStateType.OPTIM_STATES, OffloadStateType.LP_GRADS}
    assert offload_state_types(None) == frozenset(OffloadStateType)
    with pytest.raises(ZeroError) as error:
        offload_state_types(["master"])
    assert str(error.value) == ("offload_states(include=...) got unknown state 'master'; use any of "
                                "['contiguous_grad_buffer', 'hp_params', 'lp_grads', 'lp_params', 'optim_states']")


def _contract(rank: int) -> dict[str, Any]:
    import zero_core
    from zero_core import EngineMisuse

    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(2))
    _train(engine, rank, 1)
    before = engine.ledger.snapshot()
    refused: dict[str, str] = {}
    engine.offload_states(include=["optim_states"])
    after = engine.ledger.snapshot()
    forward = engine(torch.ones(2, 4, dtype=torch.bfloat16)).float().pow(2).mean()
    for call, run in (("backward", lambda: engine.backward(forward)),
                      ("save_checkpoint", lambda: engine.save_checkpoint("/nonexistent"))):
        try:
            run()
        except EngineMisuse as error:
            refused[call] = str(error)
    engine.reload_states()
    engine.offload_states()  # everything, the weights included
    try:
        engine(torch.ones(2, 4, dtype=torch.bfloat16))
    except EngineMisuse as error:
        refused["forward"] = str(error)
    engine.reload_states()
    engine.reload_states()  # nothing away: nothing to do
    losses = _train(engine, rank, 2, start=1)
    errors = {}
    for device in ("nvme", "none"):
        try:
            engine.offload_states(device=device)
        except ZeroError as error:
            errors[device] = str(error)
    engine.destroy()
    return {"unchanged": before == after, "refused": refused, "losses": losses, "errors": errors}


def _reference(rank: int) -> list[float]:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(2))
    losses = _train(engine, rank, 3)[1:]
    engine.destroy()
    return losses


def test_on_cpu_nothing_moves_but_training_waits_for_the_reload(runs: list[dict[Any, Any]]) -> None:
    result = runs[0]["contract"]
    assert result["unchanged"], "the CPU accelerator's state is host memory already: the ledger does not change"
    assert result["refused"] == {
        "backward": "engine.backward() while engine.offload_states() has moved optim_states off the accelerator; "
                    "call engine.reload_states() first",
        "save_checkpoint": "engine.save_checkpoint() while engine.offload_states() has moved optim_states off the "
                           "accelerator; call engine.reload_states() first",
        "forward": "engine.forward() while engine.offload_states() has moved lp_params off the accelerator; "
                   "call engine.reload_states() first"}
    assert result["errors"] == {"nvme": "engine.offload_states moves states to host memory only; pass device='cpu' "
                                        "(got 'nvme')"}, "device='none' only warns, as in DeepSpeed"
    assert [r["contract"]["losses"] for r in runs] == [r["reference"] for r in runs]


def _round_trip(rank: int, stage: int, precision: str, offload: bool) -> dict[str, Any]:
    import zero_core
    from zero_core.engine._state_moves import StateMover

    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(stage, precision))
    losses = _train(engine, rank, 2)
    where: dict[str, tuple[int, int]] = {}
    if offload:
        engine._moves = StateMover(engine.ledger, moves_from="cpu")  # what a CUDA engine's mover does
        held = {category: engine.ledger.current(category, "cpu") for category in CATEGORIES}
        engine.offload_states(pin_memory=False)
        where = {category: (engine.ledger.current(category, "cpu"), engine.ledger.current(category, "host"))
                 for category in CATEGORIES if held[category]}
        where["held"] = tuple(held[category] for category in CATEGORIES)  # type: ignore[assignment]
        engine.reload_states()
    losses += _train(engine, rank, 2, start=2)
    engine.destroy()
    return {"losses": losses, "where": where}


def _precision(stage: int) -> str:
    return "fp32" if stage == 1 else "bf16"  # fp32: the master is the weights themselves


def _every_run(rank: int, world_size: int) -> dict[Any, Any]:
    """Every engine the tests look at, one after the other in one 2-rank job (one spawn, not eight)."""
    runs: dict[Any, Any] = {"contract": _contract(rank), "reference": _reference(rank)}
    for stage in STAGES:
        for offload in (True, False):
            runs[stage, offload] = _round_trip(rank, stage, _precision(stage), offload)
    return runs


@pytest.fixture(scope="module")
def runs() -> list[dict[Any, Any]]:
    return run_ranks(_every_run, WORLD_SIZE, timeout=300)


@pytest.mark.parametrize("stage", STAGES)
def test_moved_states_leave_the_device_and_training_goes_on_unchanged(runs: list[dict[Any, Any]], stage: int) -> None:
    moved, plain = [r[stage, True] for r in runs], [r[stage, False] for r in runs]
    assert [r["losses"] for r in moved] == [r["losses"] for r in plain], "bit for bit after the round trip"
    where = dict(moved[0]["where"])
    held = where.pop("held")
    assert where, "the engine holds weights and optimizer state"
    for category, (on_device, at_host) in where.items():
        assert on_device == 0 and at_host == held[CATEGORIES.index(category)], category
