"""ZeroOptimizer: one step of the partitioned optimizer, and what `initialize` returns as `optimizer`.

A step: the global gradient norm (each rank's owned gradients, summed across ranks when the
policy shards the optimizer state, where each element is owned by exactly one rank); with
a non-finite norm (an fp16 overflow, or inf/NaN at any precision) skips the step; unscale and clip in one
multiply while making the fp32 gradients; the torch optimizer's step on the master; the
master copied back into the compute-dtype params; when sharded, every replicated bucket
all-gathered so all ranks hold those parameters whole again (stage 3's partitioned units
are gathered only when a module needs them). Where the gradients, the master and the state
live is their homes' business (_homes.py), so every placement takes this one path.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NoReturn

import torch
from zero_plugins import ZeroError

from ..comm import Collectives
from ..memory import MemoryLedger, read_float
from ._backward_step import BackwardStepper
from ._groups import ShardedGroup
from ._homes import Homes
from ..training import LossScaler
from ._policy import StagePolicy


class ZeroOptimizer:
    """Wraps the torch optimizer; `param_groups` and `state` are its own, so LR schedulers work unchanged."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        groups: list[ShardedGroup],
        comm: Collectives,
        loss_scaler: LossScaler,
        gradient_clipping: float,
        policy: StagePolicy,
        ledger: MemoryLedger,
        homes: Homes,
        *,
        step_in_backward: bool = False,
    ) -> None:
        self.optimizer = optimizer
        self.groups = groups
        self.loss_scaler = loss_scaler
        self.gradient_clipping = gradient_clipping
        self.overflow = False
        self._global_grad_norm: float | None = None
        self._comm = comm
        self._sharded = policy.shards_optimizer_state
        self._ledger = ledger
        self._homes = homes
        self._backward = BackwardStepper(optimizer, groups, comm, homes.device) if step_in_backward else None
        self._update_begun = False  # between the first parameter's update and the step's end

    @property
    def steps_in_backward(self) -> bool:
        """zero_optimization.step_in_backward: the backward updates the parameters as their gradients arrive."""
        return self._backward is not None

    @property
    def part_applied(self) -> bool:
        """Whether an update began and has not ended: a failure now leaves some parameters stepped, others not."""
        return self._update_begun or (self._backward is not None and self._backward.stepped_any)

    def discard_failed_step(self) -> None:
        """A checkpoint was loaded over a step that failed part-way: nothing of that step is under way any more."""
        self._update_begun = False
        if self._backward is not None:
            self._backward.discard()

    # --- what DeepSpeed's ZeRO optimizer exposes ---
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> defaultdict[torch.Tensor, Any]:
        return self.optimizer.state

    @property
    def loss_scale(self) -> float:
        return self.loss_scaler.scale

    cur_scale = loss_scale  # DeepSpeed's two names for it

    @property
    def parameter_offload(self) -> NoReturn:
        """Refused: DeepSpeed's stage-3 hook owner, whose hooks TRL's unwrap_model_for_generation takes off; an
        AttributeError would send TRL on to a wrong object (it checks with hasattr)."""
        raise ZeroError("engine.optimizer.parameter_offload (DeepSpeed's stage-3 hook owner, which TRL's "
                        "unwrap_model_for_generation reaches to take the hooks off for generation) has no counterpart "
                        "in zero: set ds3_gather_for_generation=False in the TRL config, and generation gathers each "
                        "module as it runs")

    def zero_grad(self, *, set_to_none: bool = True) -> None:
        """Free the gradient buckets (or zero them in place with `set_to_none=False`)."""
        self._homes.synchronize()  # a write-back still in flight would land in a partition zeroed here
        for group in self.groups:
            if set_to_none:
                group.grads.release()
            else:
                group.grads.zero()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "loss_scaler": self.loss_scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.loss_scaler.load_state_dict(state["loss_scaler"])

    def synchronize(self) -> None:
        """Wait for copies to and from offload devices (before reading the master or state from outside)."""
        self._homes.synchronize()

    # --- the step ---
    def step(self, before_update: Callable[[], None] | None = None) -> bool:
        """Step with the reduced gradients; False when they were non-finite (an fp16 overflow, or inf/NaN) and it was skipped.

        `before_update` is called once the gradients are known to be finite, before anything changes; it may raise
        to refuse the step (the engine's check of the losses)."""
        if self._backward is not None:
            return self._finish_backward_steps(before_update)
        scale = self.loss_scaler.scale
        self._homes.synchronize()  # gradients copied to an offloaded optimizer during backward
        scaled_norm = self._scaled_grad_norm()
        self._global_grad_norm = scaled_norm / scale
        # The norm is summed across ranks (or of gradients already equal on every rank), so every rank skips alike.
        self.overflow = not math.isfinite(scaled_norm)
        if self.overflow:
            self.zero_grad()
            self.loss_scaler.update(overflow=True)
            return False
        if before_update is not None:
            before_update()
        combined = scale
        if self.gradient_clipping > 0:
            # DeepSpeed's (and torch's clip_grad_norm_'s) coefficient, folded into the unscale.
            clip = (self._global_grad_norm + 1e-6) / self.gradient_clipping
            if clip > 1:
                combined *= clip
        self._update_begun = True
        self._homes.masters.step(self.optimizer, self.groups, 1.0 / combined)  # the placement's stepper
        self._homes.synchronize()
        return self._after_update()

    def _after_update(self) -> bool:
        """Every rank's replicated parameters whole again, the loss scale moved on and the new state counted."""
        if self._sharded:
            self._all_gather_params()
        self.loss_scaler.update(overflow=False)
        self._homes.masters.count_state(self.optimizer, self._ledger)
        self._update_begun = False
        return True

    def _finish_backward_steps(self, before_update: Callable[[], None] | None) -> bool:
        """step_in_backward: the units stepped as their gradients were reduced; the rest, and the replicas. The
        engine's check of the losses (`before_update`) runs here, after the units stepped, so it cannot refuse the
        step; a non-finite loss gives non-finite gradients, which `finish` refuses."""
        assert self._backward is not None
        if before_update is not None:
            before_update()
        self._update_begun = True
        self._global_grad_norm = self._backward.finish()
        for group in self.groups:
            group.grads.release()
        return self._after_update()

    def get_global_grad_norm(self) -> float | None:
        """The unscaled global gradient norm of the last step, before clipping (None before any step)."""
        return self._global_grad_norm

    def _scaled_grad_norm(self) -> float:
        owned = [group.grads.owned(index) for group in self.groups for index in range(len(group.grads))]
        if not owned:
            return 0.0
        squares = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in owned]).square().sum()
        if self._sharded:
            squares = squares.to(self._homes.device)  # offloaded gradients are on the host; collectives run on the device
            self._comm.all_reduce(squares)  # stage 0's gradients are already whole and equal on every rank
        return read_float(squares.sqrt(), if_fake=1.0)  # a dry run's step: finite gradients

    def _all_gather_params(self) -> None:
        work = []
        rank = self._comm.rank
        for group in self.groups:
            for index in group.flat.replicated():
                lo, hi = group.layouts[index].shard_range(rank)
                work.append(self._comm.all_gather(group.flat.bucket(index), group.flat.owned(index, lo, hi),
                                                  async_op=True))
        for handle in work:
            handle.wait()
