"""After the first optimizer step the engine pins nothing: no new pinned buffer, no copy into pinned memory.

Run with the `native` pin backend, which really locks pages here, on 2 gloo ranks: CPU offload at stages
2 and 3 (optimizer and parameters) with the saved activations of the model offloaded to host memory, and
NVMe offload of the optimizer state. The engine's memory report counts the pinned buffers requested in each
optimizer step (`report.pinning`, from `zero_pin.pin_activity()`); the pinned bytes zero-pin holds must not
grow after the first step either.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from multirank import run_ranks
from swap_helpers import direct_directory

STEPS = 4
NOTHING = {"allocations": 0, "allocated_bytes": 0, "copies": 0, "copied_bytes": 0}


def _offload(name: str, nvme_path: str) -> dict[str, Any]:
    if name == "stage2-cpu":
        return {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    if name == "stage3-cpu-both":
        return {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "cpu"},
                "offload_param": {"device": "cpu"}}
    return {"stage": 3, "sub_group_size": 2000, "stage3_param_persistence_threshold": 0,
            "offload_optimizer": {"device": "nvme", "nvme_path": nvme_path, "buffer_count": 4}}


CASES = ("stage2-cpu", "stage3-cpu-both", "stage3-nvme")


def _run(rank: int, world_size: int, nvme_path: str) -> dict[str, Any]:
    import zero_core
    import zero_pin
    from zero_core.checkpointing import offload_saved_activations

    found = {}
    for name in CASES:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
        handle = offload_saved_activations(list(model), min_bytes=0)
        config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                  "zero_optimization": _offload(name, str(Path(nvme_path) / name))}
        engine, _, _, _ = zero_core.initialize(model=model, config=config)
        pinned_after = []
        for _ in range(STEPS * 2):
            loss = engine(torch.randn(4, 32)).pow(2).mean()
            engine.backward(loss)
            engine.step()
            if engine.is_gradient_accumulation_boundary():
                pinned_after.append(zero_pin.pinned_memory_stats()["total"]["peak"])
        report = engine.memory_report()
        found[name] = {"pinning": report.pinning, "offloaded": handle.offloaded_tensors,
                       "pinned_peak_after_step": pinned_after,
                       "line": next(line for line in str(report).splitlines() if line.startswith("pinned buffers"))}
        handle.remove()
        engine.destroy()
    return found


@pytest.fixture(scope="module")
def results(native_pin_backend: object, tmp_path_factory: pytest.TempPathFactory) -> Any:
    for root in direct_directory(tmp_path_factory.mktemp("nvme")):
        yield run_ranks(_run, 2, str(root), timeout=300, env={"DS_PIN_MEMORY_BACKEND": "native"})


@pytest.mark.parametrize("name", CASES)
def test_nothing_is_pinned_after_the_first_step(results: Any, name: str) -> None:
    for per_rank in results:
        found = per_rank[name]
        assert found["offloaded"] > 0, "the activations went to host memory"
        first, *later = found["pinning"]
        assert len(later) == STEPS - 1
        assert first["allocations"] > 0 and first["copies"] == 0, "step 1 makes its buffers born pinned"
        assert later == [NOTHING] * (STEPS - 1)
        assert found["line"].endswith(f"0 copies; steps 2-{STEPS} 0 in all, 0 copies")
        peaks = found["pinned_peak_after_step"]
        assert peaks[1:] == [peaks[0]] * (STEPS - 1), "the pinned bytes stop growing after step 1"
