"""Checks before `initialize` builds anything: the model is trainable and not already wrapped, and every rank
brings the same model and the same config (one all-gather of a fingerprint; a difference fails on every rank
with the first difference and the ranks that disagree, instead of a hang or a silently different run)."""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from zero_plugins import ZeroError

from ..comm import RankMismatch, is_fake_group
from ..sharding import ParamGroup
from ..stage3 import unit_of

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig

# Set on a model that an engine wraps: the engine's hooks and buffers are on it.
WRAPPED_ATTRIBUTE = "_zero_engine_wrapped"


def check_model(model: torch.nn.Module, param_groups: list[ParamGroup], stage: int, *, trains: bool = True) -> None:
    """One clear error for a model this engine cannot train (or, with `trains=False`, run forward)."""
    name = type(model).__name__
    if getattr(model, WRAPPED_ATTRIBUTE, False):
        raise ZeroError(f"this {name} is already wrapped by a ZeroEngine (initialize was called on it before); "
                        "call engine.destroy() on that engine first, or build a new model")
    partitioned = [fqn for fqn, p in model.named_parameters() if unit_of(p) is not None]
    if partitioned and stage != 3:  # each rank holds a slice of these: stages 0-2 would compute with the slice
        raise ZeroError(f"{len(partitioned)} parameter(s) of {name} are partitioned by zero_core.Init (first: "
                        f"{partitioned[0]}), and zero_optimization.stage is {stage}: only stage 3 trains partitioned "
                        "parameters; initialize with the stage-3 config that Init was given, or build the model "
                        "outside zero_core.Init for stages 0-2")
    meta = [fqn for fqn, p in model.named_parameters() if p.device.type == "meta" and unit_of(p) is None]
    if meta:
        raise ZeroError(f"{len(meta)} parameter(s) of {name} are on the meta device and hold no values (first: "
                        f"{meta[0]}); build the model under zero_core.Init(...), or call model.to_empty(device=...) "
                        "and load the weights before initialize")
    if trains and not any(group.params for group in param_groups):
        raise ZeroError(f"{name} has no parameter with requires_grad=True among those given to initialize: "
                        "there is nothing to train; unfreeze some parameters (or pass model_parameters that train)")


def check_no_float64(model: torch.nn.Module) -> None:
    """Refuse float64 parameters (after the ranks agree: one float64 rank is the cross-rank check's to name).

    The engine computes in fp32, bf16 or fp16 and casts every floating parameter to that dtype, so a float64
    model would silently lose precision (DeepSpeed 0.19 keeps float64 in fp32 mode), and the float64 inputs
    written for it fail inside torch at the first forward ("mat1 and mat2 must have the same dtype")."""
    first = next((fqn for fqn, p in model.named_parameters() if p.dtype == torch.float64), None)
    if first is not None:
        raise ZeroError(f"parameter {first} of {type(model).__name__} is float64; zero trains in fp32, bf16 or fp16 "
                        "(the config's fp16 and bf16 blocks) and has no float64 path: convert the model with "
                        "model.float() before zero_core.initialize, and feed it float32 inputs")


def fingerprint(model: torch.nn.Module, config: ZeroConfig) -> dict[str, Any]:
    """What must be equal on every rank: each parameter (name, whole shape, dtype, trainable), the effective
    config, and the world layout."""
    params = [(fqn, list(getattr(p, "ds_shape", p.shape)), str(p.dtype), p.requires_grad)
              for fqn, p in model.named_parameters()]
    settings = json.loads(config.model_dump_json())
    return {"parameters": params, "config": settings, "world_size": dist.get_world_size()}


def check_ranks_agree(model: torch.nn.Module, config: ZeroConfig) -> None:
    """All-gather a digest of `fingerprint`; on a difference, gather the fingerprints and name the first one."""
    world = dist.get_world_size()
    if world == 1 or is_fake_group():  # a dry run's one process stands for every rank: they agree
        return
    mine = fingerprint(model, config)
    digest = hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()
    digests: list[Any] = [None] * world
    dist.all_gather_object(digests, digest)
    if len(set(digests)) == 1:
        return
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)  # only when they differ: the details, to say where
    raise RankMismatch(first_difference(everyone, digests))


def first_difference(fingerprints: list[dict[str, Any]], digests: list[str]) -> str:
    """One line: the first field that differs, its value on rank 0's side and on the ranks that disagree."""
    others = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
    theirs = fingerprints[others[0]]
    ours = fingerprints[0]
    where = f"ranks {others} differ from rank 0"
    a, b = ours["parameters"], theirs["parameters"]
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b) or a[index] != b[index]:
            left = _describe(a[index]) if index < len(a) else "no parameter"
            right = _describe(b[index]) if index < len(b) else "no parameter"
            return (f"the ranks' models differ ({where}): parameter {index}: rank 0 has {left}, rank {others[0]} "
                    f"has {right} ({len(a)} against {len(b)} parameters); every rank must build the same model")
    differences = _key_differences(ours["config"], theirs["config"], "")
    if differences:
        named = ", ".join(f"{key} is {left!r} on rank 0 and {right!r} on rank {others[0]}"
                          for key, left, right in differences[:4])
        more = f" (and {len(differences) - 4} more)" if len(differences) > 4 else ""
        return f"the ranks' configs differ ({where}): {named}{more}; every rank must load the same ds_config"
    return f"the ranks' setups differ ({where}): world size {ours['world_size']} against {theirs['world_size']}"


def _describe(param: list[Any]) -> str:
    fqn, shape, dtype, trainable = param
    return f"{fqn} {tuple(shape)} {dtype.removeprefix('torch.')}{'' if trainable else ' frozen'}"


def _key_differences(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    """Every dotted key whose value differs (a key one stage setting implies, overlap_comm, differs with it)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [found for key in sorted(set(a) | set(b))
                for found in _key_differences(a.get(key), b.get(key), f"{path}.{key}" if path else key)]
    return [] if a == b else [(path, a, b)]
