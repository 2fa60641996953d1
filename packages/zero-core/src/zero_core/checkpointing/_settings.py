"""What `configure` set: DeepSpeed's activation-checkpointing switches, process-wide as in DeepSpeed."""
from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zero_plugins import ZeroError

from zero_plugins.ds_config import ConfigError, ZeroConfig, load_config
from zero_plugins.ds_config import ActivationCheckpointingConfig, check_contiguous
from ..memory import MemoryLedger

logger = logging.getLogger("zero_core.checkpointing")


@dataclass(frozen=True)
class Settings:
    """DeepSpeed's PARTITION_ACTIVATIONS, CONTIGUOUS_CHECKPOINTING, num_layers, CPU_CHECKPOINT, SYNCHRONIZE, PROFILE_TIME."""

    partition_activations: bool = False
    contiguous_memory_optimization: bool = False
    number_checkpoints: int | None = None
    cpu_checkpointing: bool = False
    synchronize_checkpoint_boundary: bool = False
    profile: bool = False


_settings = Settings()
_configured = False
_ledger: weakref.ref[MemoryLedger] | None = None


def settings() -> Settings:
    """The settings `checkpoint` runs with now (the defaults until `configure` is called)."""
    return _settings


def configure(
    mpu_: Any = None,
    deepspeed_config: str | os.PathLike[str] | Mapping[str, Any] | ZeroConfig | None = None,
    partition_activations: bool | None = None,
    contiguous_checkpointing: bool | None = None,
    num_checkpoints: int | None = None,
    checkpoint_in_cpu: bool | None = None,
    synchronize: bool | None = None,
    profile: bool | None = None,
) -> None:
    """DeepSpeed's `deepspeed.checkpointing.configure`: start from the defaults, then the config's
    `activation_checkpointing` block (a ds_config path, dict or ZeroConfig), then the arguments given.

    `mpu_` must be None: zero has no model parallelism. `partition_activations`,
    `contiguous_checkpointing` and `num_checkpoints` are checked as DeepSpeed checks them and
    have no effect without it (docs/activations.md).
    """
    global _settings, _configured
    if mpu_ is not None:
        raise ZeroError("model parallelism (mpu_) is not supported by zero-core; pass None")
    block = _block(deepspeed_config) if deepspeed_config is not None else ActivationCheckpointingConfig()
    values: dict[str, Any] = block.model_dump()
    given = {
        "partition_activations": partition_activations,
        "contiguous_memory_optimization": contiguous_checkpointing,
        "number_checkpoints": num_checkpoints,
        "cpu_checkpointing": checkpoint_in_cpu,
        "synchronize_checkpoint_boundary": synchronize,
        "profile": profile,
    }
    values.update({key: value for key, value in given.items() if value is not None})
    new = Settings(**values)
    if new.number_checkpoints is not None and new.number_checkpoints <= 0:
        raise ConfigError("activation_checkpointing.number_checkpoints", f"must be > 0 (got {new.number_checkpoints})")
    check_contiguous(new.contiguous_memory_optimization, new.partition_activations, new.number_checkpoints)
    _settings, _configured = new, True
    logger.info("activation checkpointing: %s", new)


def _block(source: str | os.PathLike[str] | Mapping[str, Any] | ZeroConfig) -> ActivationCheckpointingConfig:
    config = source if isinstance(source, ZeroConfig) else load_config(source)
    # DeepSpeed reads a missing block as the defaults.
    return config.activation_checkpointing or ActivationCheckpointingConfig()


def is_configured() -> bool:
    """True once `configure` was called (by the user, or by `zero_core.initialize` for a config with the block)."""
    return _configured


def unconfigure() -> None:
    """Back to the defaults and `is_configured() == False` (for tests; DeepSpeed has no such call)."""
    global _settings, _configured
    _settings, _configured = Settings(), False


def use_ledger(ledger: MemoryLedger | None) -> None:
    """Count the host copies of `cpu_checkpointing` in this ledger (the latest engine's; held weakly)."""
    global _ledger
    _ledger = None if ledger is None else weakref.ref(ledger)


def ledger() -> MemoryLedger | None:
    return None if _ledger is None else _ledger()
