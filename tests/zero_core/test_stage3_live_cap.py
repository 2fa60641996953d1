"""`stage3_max_live_parameters` below one module: the module is gathered alone, as DeepSpeed does.

DeepSpeed's cap bounds prefetch and reuse only; the module about to run is always gathered.
A model whose embedding (8192 elements) is above a cap of 3000 trains on 2 ranks exactly as
it does under the default cap, the embedding is never gathered beside another unit (the
peak of gathered elements is the embedding's), and one `LiveCapWarning` names it, its size
and the value of the key that would hold it, however many passes gather it.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

VOCAB, HIDDEN, EMBED = 256, 32, 256 * 32
CAP = 3000  # above two 32x32 linears (1056 elements each), below the embedding


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mix = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mix(self.embed(ids)))


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.blocks = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                                          torch.nn.Linear(HIDDEN, HIDDEN))
        self.head = torch.nn.Linear(HIDDEN, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.encoder(ids))).pow(2).mean()


def make_model() -> Toy:
    torch.manual_seed(7)
    return Toy()


def config(max_live: int) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": 2000, "stage3_max_live_parameters": max_live}}


def _train(rank: int, max_live: int) -> dict[str, Any]:
    import warnings

    import zero_core

    data = torch.randint(0, VOCAB, (4, 4, 6), generator=torch.Generator().manual_seed(0))
    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config(max_live))
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in data:  # 4 steps: each gathers the embedding in forward and in backward
            loss = engine(batch[rank * 2 : rank * 2 + 2])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    result = {"losses": losses, "state": engine.module_state_dict(), "peak_live": engine.coordinator.peak_live_numel,
              "warned": [str(w.message) for w in caught if issubclass(w.category, zero_core.LiveCapWarning)]}
    engine.destroy()
    return result


def _run(rank: int, world_size: int) -> dict[str, Any]:
    return {"capped": _train(rank, CAP), "default": _train(rank, 1_000_000_000)}


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    from multirank import run_ranks

    return run_ranks(_run, 2, timeout=300)


def test_a_module_above_the_cap_trains_as_under_the_default_cap(results) -> None:  # type: ignore[no-untyped-def]
    for result in results:
        assert result["capped"]["losses"] == result["default"]["losses"]
    capped, default = results[0]["capped"]["state"], results[0]["default"]["state"]
    assert capped.keys() == default.keys()
    for key, value in default.items():
        assert torch.equal(capped[key], value), key


def test_a_module_above_the_cap_is_gathered_alone(results) -> None:  # type: ignore[no-untyped-def]
    for result in results:
        assert result["capped"]["peak_live"] == EMBED, "nothing else is gathered beside the embedding"
        assert result["default"]["peak_live"] > EMBED, "under the default cap, prefetch gathers beside it"


def test_one_warning_names_the_module_its_size_and_the_key(results) -> None:  # type: ignore[no-untyped-def]
    for result in results:
        assert result["capped"]["warned"] == [
            f"zero stage 3: encoder.embed has {EMBED} elements, more than zero_optimization.stage3_max_live_parameters "
            f"({CAP}); it is gathered alone, as DeepSpeed does. Set zero_optimization.stage3_max_live_parameters to "
            f"at least {EMBED} to keep every gathered parameter within it"]
        assert result["default"]["warned"] == []
