"""What a stage's builder hands the assembler: the sharded groups, the reduce buckets, and the passes."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import torch

from ._bucket import ReduceBucket
from ._groups import ShardedGroup


class TrainingPasses(Protocol):
    """What a stage does around the model's forward and backward, beyond reducing gradients."""

    def forward(self) -> AbstractContextManager[None]:
        """The scope of one forward of the model (stage 3 gathers and releases parameters in it)."""
        ...

    def backward(self) -> AbstractContextManager[None]:
        """The scope of one backward."""
        ...

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's whole weights and buffers (compute dtype, on CPU) on rank 0, an empty dict elsewhere.

        Every rank must call it (stage 3 gathers).
        """
        ...

    def remove_hooks(self) -> None:
        ...


@dataclass(frozen=True)
class ShardedState:
    groups: list[ShardedGroup]
    buckets: list[ReduceBucket]  # in launch order
    passes: TrainingPasses


class WholeParameterPasses:
    """Stages 0-2: parameters are whole on every rank, so the passes need nothing around them."""

    def __init__(self, module: torch.nn.Module, rank: int) -> None:
        self._module = module
        self._rank = rank

    def forward(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backward(self) -> AbstractContextManager[None]:
        return nullcontext()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        if self._rank != 0:
            return {}
        copies: dict[int, torch.Tensor] = {}  # tied parameters stay one tensor under each name
        result: dict[str, torch.Tensor] = {}
        for name, value in self._module.state_dict(keep_vars=True).items():
            if id(value) not in copies:
                copies[id(value)] = value.detach().to("cpu", copy=True)
            result[name] = copies[id(value)]
        return result

    def remove_hooks(self) -> None:
        return None
