"""`zero_optimization.step_in_backward`: each master tensor steps as soon as its gradient partition is reduced.

At stage 3 a unit's gradient is reduced once per backward, when the last of its parameters'
gradients arrives (the reducer refuses a second arrival), so with one micro-batch per step
that partition is final there. Stepping it at once, and freeing it, means no whole gradient
partition ever exists: model states are the master and the optimizer state, 12 bytes per
element with Adam. Adam and its kin update elementwise, so each tensor stepped alone gives
the step that stepping all of them at the end would. The config refuses what would need every
gradient first (_checks.py: clipping, fp16's overflow skip, accumulation); a non-finite
gradient cannot skip a step already half applied, so it stops training (`finish`).
"""
from __future__ import annotations

import math
from functools import partial

import torch
from zero_plugins import ZeroError

from ..comm import Collectives
from ..memory import read_float
from ._groups import ShardedGroup
from ._master import MasterParams


class BackwardStepper:
    def __init__(self, optimizer: torch.optim.Optimizer, groups: list[ShardedGroup], comm: Collectives,
                 device: torch.device) -> None:
        self._optimizer = optimizer
        self._groups = groups
        self._comm = comm
        self._device = device
        self._stepped: set[tuple[int, int]] = set()
        self._squares: torch.Tensor | None = None  # this rank's sum of squared gradients, kept on the device
        for group_index, group in enumerate(groups):
            assert isinstance(group.master, MasterParams), "step_in_backward is refused with an offloaded optimizer"
            group.grads.on_reduced = partial(self.step, group_index)

    @property
    def stepped_any(self) -> bool:
        """Whether a tensor of this step was updated already (the step is under way)."""
        return bool(self._stepped)

    def step(self, group_index: int, index: int) -> None:
        group = self._groups[group_index]
        master = group.master
        assert isinstance(master, MasterParams)
        self._stepped.add((group_index, index))  # before the update: a failure inside it leaves the step under way
        grad = group.grads.owned(index)
        square = torch.linalg.vector_norm(grad, dtype=torch.float32).square()
        self._squares = square if self._squares is None else self._squares + square
        master.step_one_tensor(self._optimizer, group_index, index, grad)
        group.grads.release_one(index)

    def discard(self) -> None:
        """Forget a step that failed part-way (the engine loaded a checkpoint over it)."""
        self._stepped.clear()
        self._squares = None

    def finish(self) -> float:
        """End the step: tensors no gradient reached step now with zeros (as the whole step would step them);
        returns the global gradient norm. A non-finite one raises: the tensors stepped before it were updated."""
        for group_index, group in enumerate(self._groups):
            for index in range(len(group.grads)):
                if (group_index, index) not in self._stepped:
                    self.step(group_index, index)
        squares = self._squares if self._squares is not None else torch.zeros((), device=self._device)
        self._comm.all_reduce(squares)
        self._stepped.clear()
        self._squares = None
        norm = read_float(squares.sqrt(), if_fake=1.0)
        if not math.isfinite(norm):
            raise ZeroError(f"a gradient of this step was not finite (global norm {norm}) under "
                            "zero_optimization.step_in_backward, which had already updated the units stepped before "
                            "it, so this step is not whole; load the last checkpoint, and set step_in_backward to "
                            "false to have such steps skipped instead")
        return norm

