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
from ._settings import ATTENTION, Cluster
from ._sources import from_module

REQUIRED = ("module", "ds_config", "world_size", "seq_len", "stage")


def estimate_memory(request: Mapping[str, Any]) -> dict[str, Any]:
    """Estimate.as_dict() of request["module"] trained with request["ds_config"] on one node of world_size GPUs.

    "stage" replaces the config's stage; "device" ("cpu", "cuda", ...; optional) decides how torch steps
    the optimizer (tensor by tensor on a CPU device); "checkpointing" (default "none") is the model's activation
    checkpointing, which the ds_config does not tell; "attention" (default "sdpa") is the model's attention kernel
    (zero_plugins.AttentionKind). Keys beyond these are ignored, so a newer
    zero-core can send more.
    """
    missing = [key for key in REQUIRED if key not in request]
    if missing:
        raise EstimateError(f"missing {', '.join(missing)}; pass all of {', '.join(REQUIRED)}", "request")
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
    zero = with_stage(zero, request["stage"])
    # torch steps tensor by tensor on a CPU device and with foreach kernels on a GPU (its defaults), unless the
    # optimizer block names the kernels (settings_from_ds_config has read them).
    if request.get("device") == "cpu":  # gloo: its collectives copy their buffers
        training = replace(training, staged_collectives=True)
        if optimizer_impl(_optimizer_params(request["ds_config"])) is None:
            training = replace(training, optimizer_impl="single-tensor")
    return estimate(from_module(request["module"]), Cluster(gpus_per_node=world_size), training, zero).as_dict()


def _optimizer_params(ds_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The optimizer block's params (settings_from_ds_config has checked the config)."""
    block = ds_config.get("optimizer") or {}
    params = block.get("params") or {}
    return params if isinstance(params, Mapping) else {}
