"""`aio` block: the async I/O settings of NVMe swapping (DeepSpeed's swap_tensor/aio_config)."""
from __future__ import annotations

from pydantic import AliasChoices, Field

from .._ds_defaults import ds_defaults
from ._base import ConfigModel
from ._types import Bool, PositiveInt

# DeepSpeed's defaults, from zero_plugins' ds_defaults.json (which the estimator reads without pydantic).
_AIO = ds_defaults("aio")


class AioConfig(ConfigModel):
    """Block size, queue depth and threads of the NVMe swapper's reads and writes."""

    block_size: PositiveInt = _AIO["block_size"]
    queue_depth: PositiveInt = _AIO["queue_depth"]
    # `thread_count` is the name older DeepSpeed releases used.
    intra_op_parallelism: PositiveInt = Field(
        default=_AIO["intra_op_parallelism"],
        validation_alias=AliasChoices("intra_op_parallelism", "thread_count"),
    )
    single_submit: Bool = _AIO["single_submit"]
    overlap_events: Bool = _AIO["overlap_events"]
    use_gds: Bool = _AIO["use_gds"]
