"""train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size."""
from __future__ import annotations

from ._checks import check_step_in_backward
from ._errors import ConfigError
from ._model import ZeroConfig


def resolve_batch_sizes(config: ZeroConfig, world_size: int) -> None:
    """Fill the missing batch settings the way DeepSpeed does, then check that the three agree."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1 (got {world_size})")
    train = config.train_batch_size
    micro = config.train_micro_batch_size_per_gpu
    accum = config.gradient_accumulation_steps
    # DeepSpeed's order of precedence; its floor divisions can give 0, which the check below reports.
    if train is not None and micro is not None and accum is None:
        accum = train // micro // world_size
    elif train is not None and micro is None and accum is not None:
        micro = train // world_size // accum
    elif train is None and micro is not None and accum is not None:
        train = micro * accum * world_size
    elif train is not None and micro is None and accum is None:
        micro, accum = train // world_size, 1
    elif train is None and micro is not None and accum is None:
        train, accum = micro * world_size, 1
    elif train is None and micro is None:
        raise ConfigError(
            "train_batch_size", "set train_batch_size or train_micro_batch_size_per_gpu (neither is given)"
        )
    assert train is not None and micro is not None and accum is not None
    if micro < 1 or accum < 1 or train != micro * accum * world_size:
        raise ConfigError(
            "train_batch_size",
            "must equal train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size "
            f"({micro} * {accum} * {world_size} = {micro * accum * world_size}, got {train}); "
            "change one of them, or leave one out to have it computed",
        )
    config.train_batch_size = train
    config.train_micro_batch_size_per_gpu = micro
    config.gradient_accumulation_steps = accum
    check_step_in_backward(config)  # accumulation is known only now
