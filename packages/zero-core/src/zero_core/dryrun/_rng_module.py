"""The lazy device's stand-in module (`torch.lazy`), which torch's checkpointing asks for RNG state.

Checkpointing saves and restores the random state of the device its tensors are on (`torch.utils.checkpoint`,
`torch.random.fork_rng`), through `torch.<device type>`. A CUDA target's fake tensors are on the lazy device
(_allocator.py, TRACED_DEVICE), which has no such module; fake tensors draw no random numbers, so its state is
empty and restoring it does nothing. Registered once per process, by the first dry run.
"""
from __future__ import annotations

import types
from typing import Any

import torch

TRACED_TYPE = "lazy"


class _Device:
    """`torch.<type>.device(index)`: the device to save the state of; one device, nothing to switch."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _module() -> types.ModuleType:
    module = types.ModuleType(f"torch.{TRACED_TYPE}", "a dry run's stand-in device module (zero_core.dryrun)")
    module._initialized = False  # type: ignore[attr-defined]  # torch.utils.checkpoint: no device states to save
    module.device = _Device  # type: ignore[attr-defined]
    module.device_count = lambda: 1  # type: ignore[attr-defined]
    module.current_device = lambda: 0  # type: ignore[attr-defined]
    module.is_available = lambda: True  # type: ignore[attr-defined]
    module.get_rng_state = lambda device=None: torch.empty(0, dtype=torch.uint8, device="cpu")  # type: ignore[attr-defined]
    module.set_rng_state = lambda state, device=None: None  # type: ignore[attr-defined]
    module.manual_seed = lambda seed: None  # type: ignore[attr-defined]
    return module


def register_rng_module() -> None:
    """Give torch a module for the lazy device, unless it has one."""
    if not hasattr(torch, TRACED_TYPE):
        torch._register_device_module(TRACED_TYPE, _module())
