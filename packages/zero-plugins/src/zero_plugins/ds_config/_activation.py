"""`activation_checkpointing` block: DeepSpeed's activation checkpointing settings (zero_core.checkpointing)."""
from __future__ import annotations

from pydantic import model_validator

from ._base import ConfigModel
from ._errors import ConfigError
from ._types import Bool, PositiveInt


class ActivationCheckpointingConfig(ConfigModel):
    """What `zero_core.checkpointing.checkpoint` does with the inputs it keeps for the recomputation.

    `partition_activations`, `contiguous_memory_optimization` and `number_checkpoints` act only
    with model parallelism in DeepSpeed (they split the kept inputs across the model-parallel
    ranks); zero has none, so they are read, checked as DeepSpeed checks them, and have no effect.
    """

    partition_activations: Bool = False
    cpu_checkpointing: Bool = False
    contiguous_memory_optimization: Bool = False
    number_checkpoints: PositiveInt | None = None
    synchronize_checkpoint_boundary: Bool = False
    profile: Bool = False

    @model_validator(mode="after")
    def _contiguous_needs_partitioning(self) -> ActivationCheckpointingConfig:
        check_contiguous(self.contiguous_memory_optimization, self.partition_activations, self.number_checkpoints)
        return self


def check_contiguous(contiguous: bool, partitioned: bool, number_checkpoints: int | None) -> None:
    """DeepSpeed's configure() asserts both of these; zero says so at load time."""
    if contiguous and not partitioned:
        raise ConfigError("activation_checkpointing.contiguous_memory_optimization",
                          "needs partition_activations: true (as in DeepSpeed); set it, or turn this off")
    if contiguous and number_checkpoints is None:
        raise ConfigError("activation_checkpointing.number_checkpoints",
                          "is required when contiguous_memory_optimization is true; set it to the number of "
                          "checkpointed layers")
