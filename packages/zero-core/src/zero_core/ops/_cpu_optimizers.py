"""DeepSpeed's CPU optimizer names, resolved to the classes the `cpu` offload device steps with.

zero-core never imports zero-offload: the class comes from the offload-device registry, as the engine
gets it when the optimizer state is offloaded, so `DeepSpeedCPUAdam` is the same class the engine
picks for an offloaded `Adam` config.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from zero_plugins import ZeroError
from zero_plugins.ds_config import ConfigError, load_config

from ..accelerator import get_accelerator
from ..memory import MemoryLedger
from ..offload import OffloadSettings, open_offload_device

_BLOCK_PATH = "zero_optimization.offload_optimizer"
# The smallest config with a cpu offload_optimizer block: the device is made for it only to be asked its class.
_CPU_CONFIG = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {
    "device": "cpu"}}}


@functools.cache
def cpu_optimizer_class(kind: str, deepspeed_name: str) -> type[torch.optim.Optimizer]:
    """The cpu offload device's optimizer for `kind` ("adam", "adagrad", "lion"); `deepspeed_name` (the
    module path a program imported) names what is missing when zero-offload is not installed."""
    config = load_config(_CPU_CONFIG, world_size=1)
    block = config.zero_optimization.offload_optimizer
    assert block is not None  # _CPU_CONFIG has one
    settings = OffloadSettings(block, _BLOCK_PATH, config.aio, get_accelerator(), MemoryLedger(), rank=0,
                               local_world_size=1)
    try:
        device = open_offload_device("cpu", settings)
    except ConfigError as error:
        raise ZeroError(f"{deepspeed_name} is zero-offload's CPU optimizer, from the cpu offload device: "
                        f"{error.problem}") from error
    try:
        found = device.optimizer_class(kind)
    finally:
        device.close()
    if found is None:
        raise ZeroError(f"{deepspeed_name}: the cpu offload device ({type(device).__module__}) has no {kind!r} "
                        "optimizer; install the zero-offload release that matches zero-core")
    return found


def cpu_optimizer_names(module: str, kinds: dict[str, str],
                        refused: dict[str, str] | None = None) -> Callable[[str], type[torch.optim.Optimizer]]:
    """A module's `__getattr__` (PEP 562) resolving its DeepSpeed names (`kinds`: name -> kind) on access, not
    at import, so a program importing them needs zero-offload only once it uses one; `refused`: name -> why not."""

    def getattr_(name: str) -> type[torch.optim.Optimizer]:
        if name in kinds:
            return cpu_optimizer_class(kinds[name], f"{module}.{name}")
        if refused and name in refused:
            raise ZeroError(f"{module}.{name} is not supported: {refused[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return getattr_
