"""DeepSpeed's activation checkpointing (`deepspeed.checkpointing`): `checkpoint`, `non_reentrant_checkpoint`,
`configure`, `is_configured`, `reset`; and `offload_saved_activations`, which keeps the activations
that chosen modules save for backward in host memory. Not to be confused with `zero_core.checkpoint`,
which saves models.

docs/activations.md describes the calls and the `activation_checkpointing` config block.
"""
from ._function import checkpoint, non_reentrant_checkpoint, reset
from ._host import release_host_pool, trim_host_pool
from ._offload import OffloadHandle, offload_saved_activations
from ._settings import Settings, configure, is_configured, settings, unconfigure, use_ledger

__all__ = [
    "OffloadHandle",
    "Settings",
    "checkpoint",
    "configure",
    "is_configured",
    "non_reentrant_checkpoint",
    "offload_saved_activations",
    "reset",
    "settings",
    "unconfigure",
    "release_host_pool",
    "trim_host_pool",
    "use_ledger",
]
