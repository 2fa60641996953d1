"""A third party's offload device, registered through `zero_register_offload_devices`, is used by name.

The plugin below is a complete device: it keeps offloaded copies in plain (unpinned) host
memory, copies synchronously, counts the bytes it moved, and leaves the optimizer to torch.
It is written against the interface before copies had handles: `to_host` and `to_device`
return None, which the engine takes as copies already complete.
The engine must place the optimizer's copies with it, train exactly as without offload, and
show the copies under the device's placement in the ledger.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from zero_plugins import hookimpl

import zero_core
from zero_core.memory import Placement
from zero_core.offload import OffloadDevice, OffloadPlan, OffloadSettings

pytestmark = pytest.mark.usefixtures("solo_process_group")


class CountingHostDevice(OffloadDevice):
    placement = Placement.HOST
    moved_bytes = 0

    def __init__(self, settings: OffloadSettings) -> None:
        super().__init__(settings)
        self.checked: list[OffloadPlan] = []

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "plain host memory"

    def check_capacity(self, plan: OffloadPlan) -> None:
        self.checked.append(plan)

    def allocate(self, numel: int, dtype: torch.dtype, category: str, pin: bool) -> torch.Tensor:
        return self.settings.ledger.register(torch.zeros(numel, dtype=dtype), category, self.placement, pinned=False)

    def to_host(self, host: torch.Tensor, source: torch.Tensor, accumulate: bool) -> None:
        CountingHostDevice.moved_bytes += source.numel() * source.element_size()
        if accumulate:
            host.add_(source)
        else:
            host.copy_(source)

    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> None:
        CountingHostDevice.moved_bytes += host.numel() * host.element_size()
        target.copy_(host)

    def synchronize(self) -> None:
        return None

    def optimizer_class(self, name: str) -> type[torch.optim.Optimizer] | None:
        return None


class CountingHostPlugin:
    @hookimpl
    def zero_register_offload_devices(self, register: Any) -> None:
        register("counting-host", CountingHostDevice)


def _train(offload: dict[str, Any]) -> tuple[list[float], Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
              "zero_optimization": {"stage": 2, **offload}}
    engine, _, _, _ = zero_core.initialize(model=model, config=config)
    data = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    losses = []
    for batch in data:
        loss = engine(batch).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    report = engine.memory_report()
    engine.destroy()
    return losses, report


def test_a_registered_device_holds_the_optimizer_copies(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    plugin_manager.register(CountingHostPlugin(), name="counting-host-plugin")
    plain, _ = _train({})
    offloaded, report = _train({"offload_optimizer": {"device": "counting-host"}})
    assert offloaded == plain, "the torch optimizer on host copies steps exactly as on the device"
    assert set(report["host"]) == {"grad.partition", "optim.master", "optim.state", "total"}
    assert not any(category.startswith("optim.") for category in report["cpu"])
    assert CountingHostDevice.moved_bytes > 0, "gradients went out and parameters came back through the device"
