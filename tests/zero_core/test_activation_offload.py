"""`zero_core.checkpointing.offload_saved_activations` on a small GPT-NeoX on 2 gloo ranks, stages 0 and 3, fp32
(docs/activations.md, "Offloading saved activations of chosen modules"): the saved activations of the
transformer layers go to host memory and come back for backward; losses, gradient norms and the trained
weights equal the run without offload exactly, the ledger (tracking on) sees the device activations
peak drop and the host copies at host/host.pinned, and `remove()` restores plain behaviour.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_models import small_gpt_neox

STAGES = (0, 3)
MODES = ("plain", "offload", "removed")
STEPS, BATCH, SEQ = 2, 2, 16
HOST = ("host", "host.pinned")


def ds_config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 3000, "stage3_param_persistence_threshold": 100},
    }


def _train_all(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core
    from zero_core.checkpointing import offload_saved_activations

    data = torch.randint(0, 96, (STEPS, world_size, BATCH, SEQ), generator=torch.Generator().manual_seed(3))
    results: dict[str, Any] = {}
    for stage in STAGES:
        for mode in MODES:
            model = small_gpt_neox(seed=0)
            model.train()
            layers = list(model.gpt_neox.layers)
            handle = offload_saved_activations(layers) if mode != "plain" else None
            if handle is not None and mode == "removed":
                handle.remove()
            engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(stage))
            engine.track_memory(True)
            losses, norms = [], []
            for step in data:
                ids = step[rank]
                loss = engine(input_ids=ids, labels=ids).loss
                engine.backward(loss)
                engine.step()
                norms.append(engine.get_global_grad_norm())
                losses.append(loss.item())
            ledger = engine.ledger
            results[f"stage{stage}-{mode}"] = {
                "losses": losses,
                "norms": norms,
                "weights": engine.module_state_dict(),
                "device_peak": ledger.peak("activations", "cpu"),
                "host_peak": max(ledger.peak("activations", where) for where in HOST),
                "host_current": sum(ledger.current("activations", where) for where in HOST),
                "offloaded_bytes": handle.offloaded_bytes if handle is not None else 0,
                "offloaded_tensors": handle.offloaded_tensors if handle is not None else 0,
                "hooks": _hooks(layers),
                "pinning": engine.memory_report().pinning,
            }
            if handle is not None:
                handle.remove()
            results[f"stage{stage}-{mode}"]["hooks_after_remove"] = _hooks(layers)
            engine.destroy()
    return results


def _hooks(layers: list[torch.nn.Module]) -> int:
    return sum(len(layer._forward_pre_hooks) + len(layer._forward_hooks) for layer in layers)


@pytest.fixture(scope="module")
def trained() -> list[dict[str, Any]]:
    from multirank import run_ranks

    return run_ranks(_train_all, 2, timeout=300)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("mode", MODES[1:])
def test_losses_gradients_and_weights_equal_the_plain_run(trained, stage: int, mode: str) -> None:  # type: ignore[no-untyped-def]
    for rank, rank_result in enumerate(trained):
        plain, got = rank_result[f"stage{stage}-plain"], rank_result[f"stage{stage}-{mode}"]
        assert len(got["losses"]) == STEPS
        assert got["losses"] == plain["losses"], "fp32: exactly the losses of the run without offload"
        assert None not in got["norms"]
        assert got["norms"] == plain["norms"], "and exactly its gradients (their global norm, step by step)"
        if rank == 0:
            assert plain["weights"].keys() == got["weights"].keys()
            for name, weight in plain["weights"].items():
                assert torch.equal(got["weights"][name], weight), name


@pytest.mark.parametrize("stage", STAGES)
def test_offload_moves_saved_activations_to_host_in_the_ledger(trained, stage: int) -> None:  # type: ignore[no-untyped-def]
    for rank_result in trained:
        plain, got = rank_result[f"stage{stage}-plain"], rank_result[f"stage{stage}-offload"]
        assert got["offloaded_tensors"] > 0 and got["offloaded_bytes"] > 0
        assert got["device_peak"] < plain["device_peak"], "the saved activations left the device"
        # Every forward offloads the same tensors, and all of one forward's copies live until its backward.
        assert got["host_peak"] == got["offloaded_bytes"] // STEPS
        # The host copies die with the graph, and their blocks stay in the pool for the next forward.
        assert got["host_current"] == got["host_peak"]
        assert plain["host_peak"] == 0


@pytest.mark.parametrize("stage", STAGES)
def test_host_copies_are_allocated_in_the_first_step_only(trained, stage: int) -> None:  # type: ignore[no-untyped-def]
    for rank_result in trained:
        got = rank_result[f"stage{stage}-offload"]
        first, *later = got["pinning"]
        assert len(later) == STEPS - 1
        # One born-pinned block per host copy of the first forward, nothing copied into pinned memory...
        assert first["allocations"] == got["offloaded_tensors"] // STEPS
        assert first["allocated_bytes"] == got["offloaded_bytes"] // STEPS and first["copies"] == 0
        # ...and none after: every later forward takes the same blocks again.
        assert all(step == {"allocations": 0, "allocated_bytes": 0, "copies": 0, "copied_bytes": 0} for step in later)


def test_stage3_copies_no_gathered_parameter(trained) -> None:  # type: ignore[no-untyped-def]
    # Stage 3's linear saves the Parameter itself and other uses see views of the gathered unit buffer:
    # none is copied, so stage 3 offloads exactly the activations stage 0 does.
    for rank_result in trained:
        stage0, stage3 = rank_result["stage0-offload"], rank_result["stage3-offload"]
        assert (stage3["offloaded_tensors"], stage3["offloaded_bytes"]) == (stage0["offloaded_tensors"],
                                                                           stage0["offloaded_bytes"])
        assert stage3["host_peak"] == stage0["host_peak"]


@pytest.mark.parametrize("stage", STAGES)
def test_remove_restores_plain_behaviour(trained, stage: int) -> None:  # type: ignore[no-untyped-def]
    for rank_result in trained:
        plain, removed = rank_result[f"stage{stage}-plain"], rank_result[f"stage{stage}-removed"]
        assert removed["hooks"] == plain["hooks"] and removed["offloaded_tensors"] == 0
        assert removed["host_peak"] == 0 and removed["device_peak"] == plain["device_peak"]
        offload = rank_result[f"stage{stage}-offload"]
        assert offload["hooks"] == plain["hooks"] + 2 * 2, "a pre- and a post-hook on each of the 2 layers"
        assert offload["hooks_after_remove"] == plain["hooks_after_remove"], "remove() after training takes them off"


def test_parameters_are_never_copied_and_small_tensors_stay() -> None:
    from zero_core.checkpointing import offload_saved_activations

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x = torch.randn(32, 64)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain = run()
    with offload_saved_activations(model, min_bytes=0) as handle:
        got = run()
    assert torch.equal(got[0], plain[0]) and all(torch.equal(a, b) for a, b in zip(got[1], plain[1]))
    # The inputs of both linears and GELU's input: 3 activations of 32x64 fp32. The weights (saved as
    # views, weight.t()) and biases stay: they would add 4 more.
    assert handle.offloaded_tensors == 3 and handle.offloaded_bytes == 3 * 32 * 64 * 4
    with offload_saved_activations(model, min_bytes=32 * 64 * 4 + 1) as big_only:
        run()
    assert big_only.offloaded_tensors == 0
    # A chosen module that uses another module's weight (tied weights) does not copy that one either.
    tied = torch.nn.Linear(64, 64)

    class UsesTied(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.linear(x, tied.weight).relu()

    uses_tied = UsesTied()
    with offload_saved_activations(uses_tied, min_bytes=0) as foreign:
        uses_tied(x.clone().requires_grad_()).sum().backward()
    assert foreign.offloaded_tensors == 2, "linear's input and relu's output; not tied.weight.t()"
    with pytest.raises(ValueError, match="min_bytes"):
        offload_saved_activations(model, min_bytes=-1)


def test_a_module_list_means_its_members() -> None:
    """A ModuleList (model.gpt_neox.layers) is never called itself: its members are the modules chosen."""
    from zero_core.checkpointing import offload_saved_activations

    layers = torch.nn.ModuleList([torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)])
    x = torch.randn(32, 64, requires_grad=True)
    with offload_saved_activations(layers, min_bytes=0) as handle:
        assert [len(layer._forward_pre_hooks) for layer in layers] == [1, 1] and not layers._forward_pre_hooks
        layers[1](layers[0](x)).sum().backward()
    assert handle.offloaded_tensors == 2, "each linear's input"
    by_name = torch.nn.ModuleDict({"first": torch.nn.Linear(64, 64)})
    with offload_saved_activations(by_name, min_bytes=0) as handle:
        by_name["first"](x).sum().backward()
    assert handle.offloaded_tensors == 1
