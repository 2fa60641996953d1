"""One planned configuration as the dry run's request (`zero_verify_candidate`): its ds_config and training loop."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zero_plugins import ds_default

from ._estimate import Estimate
from ._settings import ZERO_KEYS

# The optimizer blocks of --optimizer without a --ds-config (the dry run trains with a real optimizer).
OPTIMIZER_BLOCKS: dict[str, dict[str, Any]] = {
    "adamw": {"type": "AdamW", "params": {"lr": 1e-4}},
    "adam": {"type": "Adam", "params": {"lr": 1e-4}},
}
_OFFLOAD_BLOCKS = ("offload_optimizer", "offload_param")


@dataclass(frozen=True)
class RunSettings:
    """What is the same for every candidate: the model (a preset name or a config.json path) and the trace."""

    model: str
    lora_rank: int | None
    steps: int
    device_memory: int
    timeout: float


def dry_run_request(e: Estimate, given: Mapping[str, Any] | None, run: RunSettings) -> dict[str, Any]:
    """The `zero_verify_candidate` request of the estimate's configuration (see the hookspec)."""
    return {
        "model": run.model,
        "ds_config": ds_config_of(e, given),
        "nproc": e.cluster.world_size,
        "micro_batch": e.training.micro_batch,
        "seq_len": e.seq_len,
        "gradient_checkpointing": e.training.checkpointing == "full",
        "lora_rank": run.lora_rank,
        "attention": e.training.attention,
        "steps": run.steps,
        "device_memory": run.device_memory,
        "timeout": run.timeout,
    }


def ds_config_of(e: Estimate, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ds_config of the estimate's settings: `given` (--ds-config) with the planned keys set in it.

    A key is written where it differs from DeepSpeed's default or the given config has it, so two candidates
    that train alike have equal configs (stage 3's keys are left out below stage 3, where nothing reads them).
    """
    config = copy.deepcopy(dict(given)) if given else _fresh(e)
    if "optimizer" not in config:  # a script that passes its own optimizer to initialize (DeepSpeed-Chat's)
        config["optimizer"] = copy.deepcopy(OPTIMIZER_BLOCKS[e.training.optimizer])
    zero = config.setdefault("zero_optimization", {})
    zero["stage"] = e.zero.stage
    for block in _OFFLOAD_BLOCKS:
        if getattr(e.zero, block) == "none":
            zero.pop(block, None)
    for field, key in ZERO_KEYS.items():
        path = key.split(".")
        if path[0] != "zero_optimization" or path[-1] == "stage" or not _read_at(path[1:], e):
            continue
        value = getattr(e.zero, field)
        if value is not None and (value != ds_default(key) or _has(config, path)):
            _put(config, path, value)
    for block in _OFFLOAD_BLOCKS:  # --no-pin-memory: both or neither, as the estimate pins them
        pin = ["zero_optimization", block, "pin_memory"]
        if getattr(e.zero, block) != "none" and (not e.zero.pin_memory or _has(config, pin)):
            _put(config, pin, e.zero.pin_memory)
    if e.zero.offload_optimizer == "nvme" or e.zero.offload_param == "nvme":
        if e.zero.aio_block_size != ds_default("aio.block_size") or _has(config, ["aio", "block_size"]):
            _put(config, ["aio", "block_size"], e.zero.aio_block_size)
    config["train_micro_batch_size_per_gpu"] = e.training.micro_batch
    config["gradient_accumulation_steps"] = e.training.grad_accum
    config.pop("train_batch_size", None)  # follows from the two above and the world size
    return config


def _fresh(e: Estimate) -> dict[str, Any]:
    config: dict[str, Any] = {"optimizer": copy.deepcopy(OPTIMIZER_BLOCKS[e.training.optimizer])}
    if e.training.precision != "fp32":
        config[e.training.precision] = {"enabled": True}
    return config


def _read_at(path: list[str], e: Estimate) -> bool:
    """Whether the engine reads this zero_optimization key at the estimate's stage and offload."""
    if path[0] in _OFFLOAD_BLOCKS:
        return bool(getattr(e.zero, path[0]) != "none")
    if path[0].startswith("stage3_") or path[0] == "memory_efficient_linear":
        return e.zero.stage == 3
    return not (path[0] == "step_in_backward" and e.zero.stage != 3)


def _has(config: Mapping[str, Any], path: list[str]) -> bool:
    node: Any = config
    for name in path:
        if not isinstance(node, Mapping) or name not in node:
            return False
        node = node[name]
    return True


def _put(config: dict[str, Any], path: list[str], value: Any) -> None:
    node = config
    for name in path[:-1]:
        node = node.setdefault(name, {})
    node[path[-1]] = value
