"""The hook `zero profile` asks for its estimate through (zero-core cannot import zero-estimate)."""
from __future__ import annotations

from typing import Any

from zero_plugins import hookspec


@hookspec
def zero_estimate_memory(request: dict[str, Any]) -> dict[str, Any] | None:
    """Estimate the memory of one training setup; None if the plugin cannot.

    `request`: "module" (the live torch.nn.Module as it will train: requires_grad marks what trains),
    "ds_config" (the ds_config dict), "world_size", "seq_len", "stage" (overrides the config's),
    "checkpointing" ("none", "selective" or "full"), "attention" ("sdpa", "flash" or "eager") and "device" (the device type it trains on: torch
    steps the optimizer tensor by tensor on "cpu", with foreach kernels on a GPU). Returns zero-estimate's `Estimate.as_dict()`: its
    "lines" (category, location, bytes per rank, phases) are what `zero profile` sets beside the ledger.
    """
