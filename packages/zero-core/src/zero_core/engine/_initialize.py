"""`zero_core.initialize`: DeepSpeed's entry point, with DeepSpeed's arguments and return value."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from zero_plugins import ZeroError

from .. import checkpointing
from ..accelerator import get_accelerator
from ..comm import ensure_process_group
from zero_plugins.ds_config import load_config
from ..sharding import OptimizerFactory, ZeroOptimizer
from ._arguments import config_source
from ._assemble import assemble_engine
from ._engine import ZeroEngine


def initialize(
    args: Any = None,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | OptimizerFactory | None = None,
    model_parameters: Iterable[Any] | None = None,
    training_data: torch.utils.data.Dataset[Any] | None = None,
    lr_scheduler: Any = None,
    mpu: Any = None,
    *,
    dist_init_required: bool | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    config_params: Mapping[str, Any] | None = None,
) -> tuple[ZeroEngine, ZeroOptimizer, torch.utils.data.DataLoader[Any] | None, Any]:
    """Wrap `model` for ZeRO training; returns `(engine, optimizer, training_dataloader, lr_scheduler)`.

    - `config` (or `config_params`, or `args.deepspeed_config` from `add_config_arguments`'s
      `--deepspeed_config`): a ds_config path or dict; two of them are an error, as in DeepSpeed.
    - `optimizer`: a torch optimizer over the model's parameters, or a callable that takes
      param groups; if None, the config's `optimizer` block is built.
    - `model_parameters`: the parameters or param-group dicts to train (all of the model's
      by default); parameters with `requires_grad=False` are frozen.
    - `lr_scheduler`: a scheduler or a callable taking the optimizer; if None, the config's
      `scheduler` block is built.
    - `training_data`: a dataset; a DataLoader of micro-batches for this rank is returned.

    torch.distributed is initialised from torchrun's environment if it is not already
    (a process started without a launcher trains alone).
    """
    if model is None:
        raise ZeroError("initialize needs model=")
    if not isinstance(model, torch.nn.Module):
        raise ZeroError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if mpu is not None:
        raise ZeroError("model parallelism (mpu=) is not supported by zero-core; pass mpu=None")
    source = config_source(args, config, config_params)
    ensure_process_group(get_accelerator(), dist_init_required)
    loaded = load_config(source, world_size=dist.get_world_size())
    engine = assemble_engine(model, loaded, optimizer, model_parameters, lr_scheduler, training_data, collate_fn)
    # DeepSpeed's engine.config: the ds_config as given (the Trainer reads `engine.config.get("zero_optimization")`)
    engine.config = source
    # zero_core.checkpointing follows the block when the config has one (docs/activations.md).
    if loaded.activation_checkpointing is not None:
        checkpointing.configure(None, deepspeed_config=loaded)
    checkpointing.use_ledger(engine.ledger)
    return engine, engine.optimizer, engine.training_dataloader, engine.lr_scheduler
