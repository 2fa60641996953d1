"""Stage3Engine: the stage 0-2 training loop, with every forward and backward run as a gather pass."""
from __future__ import annotations

from typing import Any

import torch

from ..engine._collectives import Collectives
from ..engine._engine import EngineParts, ZeroEngine
from ._coordinator import GatherCoordinator
from ._hooks import ModuleHooks
from ._state_dict import consolidated_state_dict


class Stage3Engine(ZeroEngine):
    """A ZeroEngine whose parameters are partitioned; `module_state_dict()` gathers them on rank 0."""

    def __init__(self, parts: EngineParts, *, coordinator: GatherCoordinator, hooks: ModuleHooks,
                 comm: Collectives) -> None:
        super().__init__(parts)
        self.coordinator = coordinator
        self._hooks = hooks
        self._comm = comm

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.ledger.phase("forward"), self.coordinator.pass_("forward"):
            try:
                return self.module(*args, **kwargs)
            finally:
                self._hooks.reset()

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        with self.coordinator.pass_("backward"):
            return super().backward(loss, *args, **kwargs)

    def module_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's full weights and buffers (compute dtype, on CPU) on rank 0; an empty dict on other ranks.

        Every rank must call it: units are gathered one at a time (DeepSpeed's
        `_zero3_consolidated_16bit_state_dict`).
        """
        return consolidated_state_dict(self.module, self.coordinator, self._comm.rank)

    def destroy(self) -> None:
        """Remove the gradient and gather hooks from the model."""
        super().destroy()
        self._hooks.remove()
