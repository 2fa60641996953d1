"""`zero_estimate_memory`: the estimate `zero profile` sets beside the engine's ledger.

The hookspec is zero-core's (zero_core/profile/_hookspecs.py), which zero-estimate cannot
import; its request is a plain dict, so this module checks its keys itself.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zero_plugins.ds_config import IgnoredConfigKeysWarning

from . import _checks
from ._ds_config import optimizer_impl, settings_from_ds_config, with_stage
from ._errors import EstimateError
from ._estimate import estimate
from ._settings import ATTENTION, Cluster, Training, ZeroSettings
from ._sources import from_module

REQUIRED = ("module", "ds_config", "world_size", "seq_len", "stage")
VIA = ("zero_core", "torch")


def estimate_memory(request: Mapping[str, Any]) -> dict[str, Any]:
    """Estimate.as_dict() of request["module"] trained with request["ds_config"] on one node of world_size GPUs.

    "stage" replaces the config's stage; "device" ("cpu", "cuda", ...; optional) decides how torch steps
    the optimizer (tensor by tensor on a CPU device); "checkpointing" (default "none") is the model's activation
    checkpointing, which the ds_config does not tell; "checkpointing_via" (default "zero_core") is what
    checkpoints the layers: zero_core.checkpointing, where the ds_config's activation_checkpointing block acts,
    or "torch" (torch.utils.checkpoint, as Hugging Face's gradient checkpointing), where it does not;
    "attention" (default "sdpa") is the model's attention kernel (zero_plugins.AttentionKind). Keys
    beyond these are ignored, so a newer zero-core can send more.
    """
    training, zero = _settings(request, REQUIRED)
    # torch steps tensor by tensor on a CPU device and with foreach kernels on a GPU (its defaults), unless the
    # optimizer block names the kernels (settings_from_ds_config has read them).
    if request.get("device") == "cpu":  # gloo: its collectives copy their buffers
        training = replace(training, staged_collectives=True)
        if optimizer_impl(_optimizer_params(request["ds_config"])) is None:
            training = replace(training, optimizer_impl="single-tensor")
    world_size = _checks.count(request["world_size"], "world_size")
    return estimate(from_module(request["module"]), Cluster(gpus_per_node=world_size), training, zero).as_dict()


def check_request(request: Mapping[str, Any]) -> None:
    """Raise the EstimateError `estimate_memory` would for this request's settings; "module" is not needed."""
    _settings(request, tuple(key for key in REQUIRED if key != "module"))


def _settings(request: Mapping[str, Any], required: tuple[str, ...]) -> tuple[Training, ZeroSettings]:
    missing = [key for key in required if key not in request]
    if missing:
        raise EstimateError(f"missing {', '.join(missing)}; pass all of {', '.join(required)}", "request")
    world_size = _checks.count(request["world_size"], "world_size")
    with warnings.catch_warnings():  # the engine has read this config and warned of its ignored keys already
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        training, zero = settings_from_ds_config(
            request["ds_config"],
            world_size,
            checkpointing=request.get("checkpointing", "none"),
            seq_len=_checks.count(request["seq_len"], "seq_len"),
        )
    training = replace(training, attention=_checks.choice(request.get("attention", training.attention), "attention",
                                                          ATTENTION))
    if _checks.choice(request.get("checkpointing_via", "zero_core"), "checkpointing_via", VIA) == "torch":
        training = replace(training, cpu_checkpointing=False)  # the block configures what the model does not call
    return training, with_stage(zero, request["stage"])


def _optimizer_params(ds_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The optimizer block's params (settings_from_ds_config has checked the config)."""
    block = ds_config.get("optimizer") or {}
    params = block.get("params") or {}
    return params if isinstance(params, Mapping) else {}
