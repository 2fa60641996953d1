"""DeepSpeed engine calls that integrations (accelerate, the Hugging Face Trainer, RLHF loops) make beyond the
training loop, under DeepSpeed's names and with its contracts (docs/engine.md, "DeepSpeed's calls").

A mixin ZeroEngine inherits: the training loop stays in _engine.py.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from zero_plugins import ZeroError, staged_file

from ..checkpoint import AsyncSaver
from ..sharding import StagePolicy, TrainingPasses, ZeroOptimizer
from ._state_moves import StateMover, engine_states, offload_state_types
from ._usage import CallOrder, EngineMisuse

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig

log = logging.getLogger("zero_core.engine")

GATHER_ON_SAVE_KEY = "zero_optimization.stage3_gather_16bit_weights_on_model_save"


class DeepSpeedCalls:
    """DeepSpeed's calls around the loop: the accumulation boundary, consolidated 16-bit weights, state offload."""

    # Set by ZeroEngine.__init__.
    module: torch.nn.Module
    global_rank: int
    policy: StagePolicy
    zero_config: ZeroConfig
    _passes: TrainingPasses
    _order: CallOrder
    micro_steps: int
    optimizer: ZeroOptimizer
    _saver: AsyncSaver
    _moves: StateMover
    _boundary_override: bool | None

    def steps_per_print(self) -> int | None:
        """The config's `steps_per_print` (None: never; DeepSpeed 0.19's default); tput_timer logs at that interval."""
        return self.zero_config.steps_per_print

    def compile(self, *args: object, **kwargs: object) -> None:
        """Refused: DeepSpeed's `engine.compile()` (which accelerate calls when its dynamo plugin is on) compiles
        the engine's forward with its hooks; torch.nn.Module's would compile around zero's gathering hooks."""
        raise ZeroError("engine.compile() (DeepSpeed's torch.compile of the engine) is not supported by zero; run "
                        "without it (accelerate: dynamo_backend 'no', the Trainer: torch_compile=False)")

    def is_gradient_accumulation_boundary(self) -> bool:
        """Whether the current micro-batch's backward reduces and its step applies: the override, else the count."""
        if self._boundary_override is not None:
            return self._boundary_override
        return (self.micro_steps + 1) % int(cast(int, self.zero_config.gradient_accumulation_steps)) == 0

    def set_gradient_accumulation_boundary(self, is_boundary: bool | None) -> None:
        """Decide whether the coming micro-batches end an accumulation (DeepSpeed's override).

        As in DeepSpeed the setting stays until it is set again: True makes every following `backward` reduce
        and every `step` apply, False holds both off; None (zero's own) returns to counting micro-batches.
        Set it before the micro-batch's backward: the reduction follows the value backward saw. A backward made
        while it was False needs no step (accelerate calls step only at the boundary): setting it again, or the
        next backward, adds that micro-batch to the accumulation.
        """
        if self._boundary_override is False:
            self._order.fold_held_off()
        previous, before = self._boundary_override, self.is_gradient_accumulation_boundary()
        self._boundary_override = None if is_boundary is None else bool(is_boundary)
        if self._order.backward_pending and self.is_gradient_accumulation_boundary() != before:
            self._boundary_override = previous
            raise EngineMisuse("engine.set_gradient_accumulation_boundary() between backward() and step() changes "
                               "the boundary that backward already reduced for; set it before backward")

    def zero_gather_16bit_weights_on_model_save(self) -> bool:
        """The config's `stage3_gather_16bit_weights_on_model_save` (False unless set, at every stage, as in DeepSpeed)."""
        return bool(self.zero_config.zero_optimization.stage3_gather_16bit_weights_on_model_save)

    def _zero3_consolidated_16bit_state_dict(self, *, exclude_frozen_parameters: bool = False
                                             ) -> dict[str, torch.Tensor] | None:
        """The model's whole weights and buffers in the compute dtype, on CPU, on rank 0; None on other ranks.

        Every rank must call it: at stage 3 units are gathered one at a time, never the whole model at once.
        Tied parameters are one tensor under each name. DeepSpeed refuses stages 0-2 (a ValueError); here they
        give the same dictionary, since their weights are already whole.
        """
        self._order.check_whole("_zero3_consolidated_16bit_state_dict")
        self._order.check_states_present("_zero3_consolidated_16bit_state_dict")
        state = self._passes.full_state_dict()
        if self.global_rank != 0:
            return None
        if exclude_frozen_parameters:
            frozen = {name for name, param in self.module.named_parameters(remove_duplicate=False)
                      if not param.requires_grad}
            state = {name: value for name, value in state.items() if name not in frozen}
        return state

    def save_16bit_model(self, save_dir: str | os.PathLike[str], save_filename: str = "pytorch_model.bin",
                         *, exclude_frozen_parameters: bool = False) -> bool:
        """DeepSpeed's call: rank 0 writes the model's weights and buffers in the compute dtype to
        `<save_dir>/<save_filename>` with torch.save and every rank returns True. Every rank must call it.

        At stage 3 without `stage3_gather_16bit_weights_on_model_save` nothing is written and it returns False,
        as in DeepSpeed (with a WARNING naming the key, where DeepSpeed logs at INFO).
        """
        if self.policy.stage == 3 and not self.zero_gather_16bit_weights_on_model_save():
            if self.global_rank == 0:
                log.warning("engine.save_16bit_model wrote nothing: at stage 3 it gathers the partitioned weights only "
                            "with %s: true; set it, or save a checkpoint and run `zero checkpoint export`",
                            GATHER_ON_SAVE_KEY)
            return False
        state = self._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=exclude_frozen_parameters)
        if state is not None:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            with staged_file(Path(save_dir) / save_filename) as fresh:  # a link there is replaced, not written through
                torch.save(state, fresh)
        return True

    def offload_states(self, include: Iterable[object] | None = None, device: object = "cpu", *,
                       pin_memory: bool = True, non_blocking: bool = False) -> None:
        """DeepSpeed's call: move the training state off the accelerator into host memory (pinned by default) until
        `reload_states()`. `include` names DeepSpeed's state types (`optim_states`, `hp_params`, `lp_params`,
        `lp_grads`, `contiguous_grad_buffer`; its enum's members work too), all of them by default.

        Until the reload, training calls (and checkpoints) are refused; a forward runs unless `lp_params` is away.
        On the CPU accelerator the state is in host memory already: nothing moves, the contract is the same.
        """
        target = str(getattr(device, "value", device))
        if target == "none":
            log.warning("engine.offload_states(device='none') moved nothing; pass device='cpu' to offload")
            return
        if target != "cpu":
            raise ZeroError(f"engine.offload_states moves states to host memory only; pass device='cpu' (got {target!r})")
        kinds = offload_state_types(include)
        self._saver.wait()  # an asynchronous save may still be reading the state
        moved = self._moves.offload(engine_states(self.module, self.optimizer), kinds, pin_memory=pin_memory,
                                    non_blocking=non_blocking)
        self._order.states_away = frozenset(kind.value for kind in self._moves.away)
        log.info("engine.offload_states moved %d bytes to host memory (%s)", moved, ", ".join(sorted(self._order.states_away)))

    def reload_states(self, *, non_blocking: bool = False) -> None:
        """DeepSpeed's call: bring back what `offload_states()` moved; training may go on. Nothing away: nothing done."""
        moved = self._moves.reload(non_blocking=non_blocking)
        self._order.states_away = frozenset()
        log.info("engine.reload_states moved %d bytes back to the accelerator", moved)
