"""The hook `zero profile` asks for its estimate through (zero-core cannot import zero-estimate)."""
from __future__ import annotations

from typing import Any

from zero_plugins import hookspec


@hookspec
def zero_estimate_memory(request: dict[str, Any]) -> dict[str, Any] | None:
    """Estimate the memory of one training setup; None if the plugin cannot.

    `request`: "module" (the live torch.nn.Module as it will train: requires_grad marks what trains),
    "ds_config" (the ds_config dict), "world_size", "seq_len", "stage" (overrides the config's),
    "checkpointing" ("none", "selective" or "full"), "checkpointing_via" ("zero_core", the default:
    zero_core.checkpointing, which the ds_config's activation_checkpointing block configures; or "torch":
    torch.utils.checkpoint, as Hugging Face's gradient checkpointing, where the block does nothing),
    "attention" ("sdpa", "flash" or "eager": the model's attention kernel) and
    "device" (the device type it trains on: torch steps the optimizer tensor by tensor on "cpu", with
    foreach kernels on a GPU). Returns zero-estimate's `Estimate.as_dict()`: its
    "lines" (category, location, bytes per rank, phases) are what `zero profile` sets beside the ledger.
    """


@hookspec
def zero_estimate_check(request: dict[str, Any]) -> None:
    """Raise, as `zero_estimate_memory` would, if the plugin cannot estimate this setting.

    `request` is `zero_estimate_memory`'s without "module": `zero profile` asks it for every setting
    before any rank builds or traces a model, so a refusal costs seconds, not a traced stage.
    """
