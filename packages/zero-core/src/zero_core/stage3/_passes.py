"""Stage 3's training passes: every forward and backward is a gather pass of the coordinator."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from ._coordinator import GatherCoordinator, PassKind
from ._hooks import ModuleHooks
from ._state_dict import consolidated_state_dict


class GatheringPasses:
    """A TrainingPasses whose module hooks gather each module's units around its forward and backward."""

    def __init__(self, module: torch.nn.Module, coordinator: GatherCoordinator, hooks: ModuleHooks,
                 rank: int) -> None:
        self.coordinator = coordinator
        self._module = module
        self._hooks = hooks
        self._rank = rank

    @contextmanager
    def forward(self) -> Iterator[None]:
        with self.coordinator.pass_(PassKind.FORWARD):
            try:
                yield
            finally:
                self._hooks.reset()

    def backward(self) -> AbstractContextManager[None]:
        return self.coordinator.pass_(PassKind.BACKWARD)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Units are gathered one at a time, in the same order on every rank (DeepSpeed's
        `_zero3_consolidated_16bit_state_dict`)."""
        return consolidated_state_dict(self._module, self.coordinator, self._rank)

    def remove_hooks(self) -> None:
        self._hooks.remove()
