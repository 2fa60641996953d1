"""Stage-3 memory, exactly, through the ledger (bf16 compute, Adam), on 2 and 4 ranks.

The placement plan's contract for P trainable and F frozen parameters on N ranks: each rank
holds 2F/N 16-bit partitions of the frozen ones [param.partition] (trainable ones keep none:
gathers cast the master), 4P/N fp32 master [optim.master] and, once stepped, 8P/N Adam state
[optim.state] (plus 4 bytes of step counter per unit); the 4P/N fp32 gradient partition
[grad.partition] exists from backward to the step, and with `step_in_backward` one unit's at a
time. The models' unit
sizes are multiples of 4, so nothing is padded. Gathered parameters [param.gathered] stay
within `stage3_max_live_parameters` during forward, and after forward with the
memory-efficient linear nothing gathered is left but the persistent parameters; with the
stock linear, the weights autograd saved are still there [param.gathered.held].
Each configuration is built and trained inside a StorageTracker, which proves the ledger
complete: every byte alive after a step is a byte the ledger counts.
"""
from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest
import torch

from engine_helpers import (MEMORY_MODEL_INPUTS, collective_counts, collective_delta, count_params, memory_config,
                            memory_model, wait_until_freed)

UNIT = 64 * 64 + 64  # one Linear(64, 64)
STEP_COUNTER = 4


class Reused(torch.nn.Module):
    """Layer 0 runs again after layer 1: a reuse distance of one unit."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index in (0, 1, 0, 2):
            x = torch.tanh(self.layers[index](x))
        return x


def make_model(kind: str) -> torch.nn.Module:
    if kind in MEMORY_MODEL_INPUTS:
        return memory_model(kind)
    torch.manual_seed(0)
    if kind == "deep":
        return torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(6)))
    return Reused()


IN_FEATURES = {**MEMORY_MODEL_INPUTS, "deep": 64, "reused": 64}


def config(**zero: Any) -> dict[str, Any]:
    return memory_config({"stage": 3, "stage3_param_persistence_threshold": 0, **zero})


def _settle(engine) -> None:  # type: ignore[no-untyped-def]
    """Wait until the buffers stage 3 frees after a step and after each gather are really gone."""
    wait_until_freed(engine, ("grad.partition", "grad.bucket", "param.gathered"))


def _current(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {c: f["current"] for c, f in engine.memory_report()["cpu"].items() if f["current"]}


def _contract(rank: int, world_size: int, kind: str) -> dict[str, Any]:
    import zero_core
    from zero_core import StorageTracker

    x = torch.randn(4, IN_FEATURES[kind]).bfloat16()
    with StorageTracker() as tracker:
        engine, _, _, _ = zero_core.initialize(model=make_model(kind), config=config())
        after_init = _current(engine)
        shapes = {name: (getattr(p, "ds_numel", None), getattr(p, "ds_shape", None), p.numel())
                  for name, p in engine.module.named_parameters()}
        for _ in range(2):
            before = collective_counts(engine)
            loss = engine(x).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
            _settle(engine)
        sent = collective_delta(collective_counts(engine), before)
        del loss, x  # x: the memory-efficient linear's backward reshapes it, so the tracker has seen it
        gc.collect()
        report = engine.memory_report()["cpu"]
        alive = tracker.current_bytes("cpu")
    units = sum(len(group.flat.units) for group in engine.optimizer.groups)
    engine.destroy()
    return {"after_init": after_init, "after_steps": {c: f["current"] for c, f in report.items() if f["current"]},
            "peaks": {c: f["peak"] for c, f in report.items()}, "alive": alive, "shapes": shapes, "units": units,
            "sent": sent}


def _bounds(rank: int, world_size: int, efficient: bool) -> dict[str, Any]:
    import zero_core

    max_live, prefetch = 3 * UNIT, UNIT
    engine, _, _, _ = zero_core.initialize(model=make_model("deep"), config=config(
        stage3_max_live_parameters=max_live, stage3_prefetch_bucket_size=prefetch, memory_efficient_linear=efficient))
    x = torch.randn(4, 64, requires_grad=True).bfloat16()
    result: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            _settle(engine) if efficient else None
            engine.ledger.reset_peaks()
            loss = engine(x).float().pow(2).mean()
            result[step] = {"gathered_peak": engine.ledger.peak("param.gathered"),
                            "after_forward": {c: engine.ledger.current(c)
                                              for c in ("param.gathered", "param.gathered.held", "param.persistent")},
                            "prefetched": engine.coordinator.prefetched}
            engine.backward(loss)
            engine.step()
            del loss
    result["peak_live"] = engine.coordinator.peak_live_numel
    result["warnings"] = [str(w.message) for w in caught if "still alive after release" in str(w.message)]
    engine.destroy()
    return result


def _reuse(rank: int, world_size: int, distance: int) -> list[int]:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=make_model("reused"), config=config(
        stage3_max_reuse_distance=distance, stage3_prefetch_bucket_size=0))
    gathers = []
    for _ in range(2):
        before = collective_counts(engine, "calls")
        loss = engine(torch.randn(4, 64).bfloat16()).float().mean()
        gathers.append(collective_delta(collective_counts(engine, "calls"), before).get("all_gather", 0))
        engine.backward(loss)
        engine.step()
    engine.destroy()
    return gathers


def _step_in_backward(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=make_model("deep"), config=memory_config(
        {"stage": 3, "stage3_param_persistence_threshold": 0, "step_in_backward": True}, gradient_clipping=0))
    x = torch.randn(4, 64).bfloat16()
    for _ in range(2):
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        after_backward = _current(engine)
        engine.step()
        _settle(engine)
    report = engine.memory_report()["cpu"]
    units = sum(len(group.flat.units) for group in engine.optimizer.groups)
    engine.destroy()
    return {"after_backward": after_backward, "units": units, "peaks": {c: f["peak"] for c, f in report.items()},
            "after_steps": {c: f["current"] for c, f in report.items() if f["current"]}}


def _persistent(rank: int, world_size: int) -> dict[str, int]:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=make_model("dense"), config=config(
        stage3_param_persistence_threshold=64))
    loss = engine(torch.randn(4, 32).bfloat16()).float().mean()
    after_forward = {c: engine.ledger.current(c) for c in ("param.persistent", "param.gathered")}
    engine.backward(loss)
    engine.step()
    engine.destroy()
    return after_forward


def _measure(rank: int, world_size: int) -> dict[Any, Any]:
    results: dict[Any, Any] = {kind: _contract(rank, world_size, kind) for kind in ("dense", "lora")}
    results["bounds", True] = _bounds(rank, world_size, True)
    results["bounds", False] = _bounds(rank, world_size, False)
    results["reuse"] = {distance: _reuse(rank, world_size, distance) for distance in (0, UNIT)}
    results["persistent"] = _persistent(rank, world_size)
    results["step_in_backward"] = _step_in_backward(rank, world_size)
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def measured(request) -> tuple[int, list[dict[Any, Any]]]:  # type: ignore[no-untyped-def]
    from multirank import run_ranks

    return request.param, run_ranks(_measure, request.param, timeout=300)


@pytest.mark.parametrize("kind", ["dense", "lora"])
def test_ledger_matches_the_stage3_contract(measured, kind: str) -> None:  # type: ignore[no-untyped-def]
    """The placement plan's stage 3 with bf16 compute: no 16-bit partition of trainable parameters (gathers cast
    the fp32 master), frozen ones keep theirs; gradients are reduced straight into fp32 partitions."""
    n, per_rank = measured
    p, f = count_params(make_model(kind))
    for result in per_rank[:]:
        r = result[kind]
        at_rest = {"param.partition": 2 * f // n, "optim.master": 4 * p // n}
        at_rest = {category: size for category, size in at_rest.items() if size}
        assert r["after_init"] == {**at_rest, "total": sum(at_rest.values())}
        expected = {**at_rest, "optim.state": 8 * p // n + STEP_COUNTER * r["units"]}
        expected["total"] = sum(expected.values())
        assert r["after_steps"] == expected
        assert r["peaks"]["grad.partition"] == 4 * p // n
        assert r["alive"] == expected["total"], "every byte alive after a step is in the ledger"
        for name, (ds_numel, ds_shape, numel) in r["shapes"].items():
            assert numel == 0 and ds_numel == torch.Size(ds_shape).numel() > 0, name


def test_step_in_backward_holds_one_unit_gradient_at_a_time(measured) -> None:  # type: ignore[no-untyped-def]
    """zero_optimization.step_in_backward: each unit steps and frees its fp32 gradient partition as it is reduced,
    so backward never holds two, and what is left at rest is the master and Adam's state (12 bytes per element)."""
    n, per_rank = measured
    p = 6 * UNIT
    for result in per_rank:
        r = result["step_in_backward"]
        assert r["peaks"]["grad.partition"] == 4 * UNIT // n
        assert r["after_backward"] == {"optim.master": 4 * p // n, "optim.state": 8 * p // n + STEP_COUNTER * r["units"],
                                       "total": 12 * p // n + STEP_COUNTER * r["units"]}
        assert r["after_steps"] == r["after_backward"]


@pytest.mark.parametrize("kind", ["dense", "lora"])
def test_bytes_sent_per_step_are_3_times_the_16bit_model(measured, kind: str) -> None:  # type: ignore[no-untyped-def]
    """DESIGN.md: 3P per step at stage 3 (ZeRO paper): gather for forward, again for backward, reduce-scatter."""
    n, per_rank = measured
    p, f = count_params(make_model(kind))
    ring = (n - 1) * 2 * (p + f) // n  # (N-1)/N of the 16-bit model, as the ring sends it
    for result in per_rank:
        sent = result[kind]["sent"]
        # frozen bases are gathered in backward only where their input needs a gradient: all but the first
        frozen_first = 0 if kind == "dense" else (n - 1) * 2 * (64 * 64 + 64) // n
        assert sent["all_gather"] == 2 * ring - frozen_first
        assert sent["reduce_scatter"] == (n - 1) * 2 * p // n
        assert sent == {"all_gather": sent["all_gather"], "reduce_scatter": sent["reduce_scatter"],
                        "all_reduce": 2 * (n - 1) * 4 // n}


def test_gathered_parameters_stay_within_the_live_cap(measured) -> None:  # type: ignore[no-untyped-def]
    _, per_rank = measured
    for result in per_rank:
        r = result["bounds", True]
        assert r["peak_live"] <= 3 * UNIT
        for step in (0, 1):
            assert 0 < r[step]["gathered_peak"] <= 2 * 3 * UNIT
        assert r[0]["prefetched"] == 0 < r[1]["prefetched"], "prefetch follows the first step's trace"


def test_nothing_gathered_after_forward_with_memory_efficient_linear(measured) -> None:  # type: ignore[no-untyped-def]
    _, per_rank = measured
    for result in per_rank:
        r = result["bounds", True]
        for step in (0, 1):
            assert r[step]["after_forward"] == {"param.gathered": 0, "param.gathered.held": 0, "param.persistent": 0}
        assert r["warnings"] == []
        assert result["persistent"]["param.gathered"] == 0
        assert result["persistent"]["param.persistent"] == 2 * (64 + 64 + 16), "biases <= threshold stay whole"


def test_stock_linear_holds_every_weight_until_backward(measured) -> None:  # type: ignore[no-untyped-def]
    _, per_rank = measured
    for result in per_rank:
        r = result["bounds", False]
        for step in (0, 1):
            # every layer's input needs a gradient, so F.linear saved a view of each gathered weight
            assert r[step]["after_forward"]["param.gathered.held"] == 2 * 6 * UNIT
        assert len(r["warnings"]) == 1 and "autograd saved a view of the gathered weight" in r["warnings"][0]


def test_reuse_distance_keeps_a_unit_gathered(measured) -> None:  # type: ignore[no-untyped-def]
    _, per_rank = measured
    for result in per_rank:
        assert result["reuse"][0] == [4, 4]
        assert result["reuse"][UNIT] == [4, 3], "layer 0 is kept for its second use once the trace is known"
