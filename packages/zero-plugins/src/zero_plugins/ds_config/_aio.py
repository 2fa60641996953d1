"""`aio` block: the async I/O settings of NVMe swapping (DeepSpeed's swap_tensor/aio_config)."""
from __future__ import annotations

from pydantic import AliasChoices, Field

from ._base import ConfigModel
from ._types import Bool, PositiveInt


class AioConfig(ConfigModel):
    """Block size, queue depth and threads of the NVMe swapper's reads and writes."""

    block_size: PositiveInt = 1_048_576
    queue_depth: PositiveInt = 8
    # `thread_count` is the name older DeepSpeed releases used.
    intra_op_parallelism: PositiveInt = Field(
        default=1, validation_alias=AliasChoices("intra_op_parallelism", "thread_count")
    )
    single_submit: Bool = False
    overlap_events: Bool = True
    use_gds: Bool = False
