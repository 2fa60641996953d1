"""ZeroEngine: DeepSpeed's training loop (`engine(batch)`, `engine.backward(loss)`, `engine.step()`)."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from zero_plugins import ZeroError, env_int

from ..accelerator import get_accelerator, pinned_stats
from ..comm import Collectives, RankProgress
from ..memory import LeverSetup, MemoryLedger, MemoryReport
from ..sharding import GradReducer, Homes, StagePolicy, TrainingPasses, ZeroOptimizer
from ..checkpoint import AsyncSaver
from ..stage3 import GatherCoordinator, GatheringPasses
from ._deepspeed_calls import DeepSpeedCalls
from ._pin_steps import PinningPerStep
from ._inputs import LossWatch, TrainableSet, check_batch, check_loss, check_lr_kwargs, check_reached
from ._preflight import WRAPPED_ATTRIBUTE
from ._skips import SkippedSteps
from ._state_moves import StateMover
from ._throughput import ThroughputTimer
from ._usage import CallOrder
from ._whole_step import InterruptsHeld, half_applied

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig

_LOGGER = logging.getLogger("zero_core.engine")


@dataclass(frozen=True)
class EngineParts:
    """What the assembler hands the engine: the model, the stage's parts and where they run."""

    module: torch.nn.Module
    config: ZeroConfig
    policy: StagePolicy
    optimizer: ZeroOptimizer
    lr_scheduler: Any
    reducer: GradReducer
    passes: TrainingPasses
    comm: Collectives
    ledger: MemoryLedger
    device: torch.device
    dtype: torch.dtype
    homes: Homes  # every copy's home; its offload devices are closed by destroy()
    training_dataloader: torch.utils.data.DataLoader[Any] | None = None
    forward_only: bool = False  # built without an optimizer: backward and step are refused


class ZeroEngine(DeepSpeedCalls, torch.nn.Module):
    """Wraps the model. Call `step()` after every `backward()`: it steps the optimizer only at
    the gradient-accumulation boundary, as DeepSpeed's does. Attributes the engine lacks are
    looked up on the model, so `engine.generate(...)` reaches a Hugging Face model; `engine.config`
    is DeepSpeed's (the ds_config `initialize` was given), the model's is `engine.module.config`.
    """

    config: Any  # set by initialize

    def __init__(self, parts: EngineParts) -> None:
        super().__init__()
        self.module = parts.module
        self.zero_config = parts.config
        self.optimizer = parts.optimizer
        self.lr_scheduler = parts.lr_scheduler
        self.training_dataloader = parts.training_dataloader
        self.ledger = parts.ledger
        self.device = parts.device
        self.compute_dtype = parts.dtype
        self.policy = parts.policy
        self.global_rank = parts.comm.rank
        self.world_size = parts.comm.world_size
        self._comm = parts.comm
        self.local_rank = env_int("LOCAL_RANK", 0, minimum=0)
        self.micro_steps = 0
        self.global_steps = 0
        self.global_samples = 0
        self.skipped_steps = 0
        self._step_applied = False
        self._boundary_override: bool | None = None  # set_gradient_accumulation_boundary's, None: count micro-batches
        self._reducer = parts.reducer
        self._passes = parts.passes
        self._homes = parts.homes
        self._saver = AsyncSaver()
        # engine.offload_states(): on the CPU accelerator the state is in host memory already
        self._moves = StateMover(parts.ledger, None if parts.device.type == "cpu" else parts.device.type)
        limits = parts.config.non_finite_steps
        dynamic = parts.config.fp16.enabled and parts.config.fp16.dynamic
        self._order = CallOrder(forward_only=parts.forward_only)
        self._skips = SkippedSteps(limits.consecutive_limit(dynamic), limits.initial_limit(dynamic))
        self._trainable = TrainableSet(parts.module)
        self._losses = LossWatch()
        self._pinning = PinningPerStep()
        self._interrupts: InterruptsHeld | None = None  # held from a backward that steps until its step() ends
        self.tput_timer = ThroughputTimer(self.train_batch_size(), synchronize=get_accelerator().synchronize,
                                          steps_per_output=parts.config.steps_per_print)

    @property
    def progress(self) -> RankProgress:
        """Where this rank is, posted for its peers: a peer whose collective fails names it."""
        return self._comm.progress

    @property
    def coordinator(self) -> GatherCoordinator | None:
        """Stage 3's gather coordinator (prefetch and live-parameter figures); None at stages 0-2."""
        return self._passes.coordinator if isinstance(self._passes, GatheringPasses) else None

    # --- the training loop ---
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._order.check_alive("forward")
        self._post("forward")
        try:
            check_batch(args, kwargs)
        except ZeroError as error:
            self._post_failure("forward", error)
            raise
        self.tput_timer.start()  # DeepSpeed starts it in its data loader instead when it built one; ours does not
        with self.ledger.phase("forward"), self._passes.forward():
            return self.module(*args, **kwargs)

    def backward(self, loss: torch.Tensor, *, retain_graph: bool = False, scale_wrt_gas: bool = True) -> torch.Tensor:
        """Backward of `loss / gradient_accumulation_steps` (times the fp16 loss scale); returns `loss`.

        At the accumulation boundary the gradients are averaged across ranks when this returns.
        `scale_wrt_gas=False` skips the division, for a loss the caller has already divided (DeepSpeed's flag).
        """
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ZeroError("engine.backward needs the loss as a tensor with one element (reduce it with .mean() "
                            "or .sum() first)")
        self._order.check_alive("backward")
        self._trainable.check()
        check_loss(loss)
        if self._boundary_override is False:
            self._order.fold_held_off()
        self._order.backward()
        scaled = loss.float()
        accumulation = self.gradient_accumulation_steps()
        if accumulation > 1 and scale_wrt_gas:
            scaled = scaled / accumulation
        scale = self.optimizer.loss_scaler.scale
        if scale != 1.0:
            scaled = scaled * scale
        self._post("backward")
        if self.optimizer.steps_in_backward:
            # the backward updates the parameters, so the step begins here: an interrupt waits for step()'s end
            self._interrupts = InterruptsHeld(f"step {self.global_steps + 1}").__enter__()
        with self._passes.backward(), self.ledger.phase("backward"):
            for group in self.optimizer.groups:
                group.grads.attach()
            self._reducer.begin(reduce=self.is_gradient_accumulation_boundary())
            try:
                scaled.backward(retain_graph=retain_graph)
                self._reducer.end()  # (the last buckets' reductions: under step_in_backward, their steps)
            except BaseException as error:
                self._reducer.abort()
                self._order.backward_pending = False  # this micro-batch's backward did not happen
                self._post_failure("backward", error)
                self._mark_if_half_applied(error, self.optimizer.part_applied)
                self._release_interrupts(error)
                raise
        try:
            check_reached(self._reducer.received)
        except ZeroError as error:
            self._order.backward_pending = False  # refused: a backward with a corrected loss may follow
            self._post_failure("backward", error)
            self._mark_if_half_applied(error, self.optimizer.part_applied)
            self._release_interrupts(error)
            raise
        self._losses.add(loss)
        return loss

    def step(self, lr_kwargs: dict[str, Any] | None = None) -> None:
        """Count one micro-batch; at the boundary, step the optimizer and then the LR scheduler.

        Non-finite gradients (an fp16 overflow, or inf/NaN at any precision) skip the optimizer step and the
        scheduler step on every rank (`skipped_steps` counts them, a WARNING says so; docs/reliability.md).
        """
        check_lr_kwargs(self.lr_scheduler, lr_kwargs)
        self._order.step()
        self._step_applied = False
        boundary = self.is_gradient_accumulation_boundary()
        if boundary:
            self._saver.wait_for_snapshot()  # an asynchronous save still copying the weights the step changes
            interrupts, self._interrupts = self._interrupts or InterruptsHeld(f"step {self.global_steps + 1}"), None
            with interrupts:
                self._boundary_step(lr_kwargs)
            self._order.accumulated = 0
        else:
            self._order.accumulated += 1
        self.tput_timer.stop(global_step=boundary, report_speed=self.global_rank == 0)
        self.micro_steps += 1

    def _release_interrupts(self, error: BaseException) -> None:
        """A backward that failed ends the step it began: interrupts are no longer held for it."""
        if self._interrupts is not None:
            self._interrupts.__exit__(type(error), error, None)
            self._interrupts = None

    def _boundary_step(self, lr_kwargs: dict[str, Any] | None) -> None:
        """The optimizer's step, the scheduler's and the counters': whole, or the engine refuses to go on."""
        scale = self.optimizer.loss_scale
        self._post("step")
        applied = False
        try:
            with self.ledger.phase("step"):
                try:
                    applied = self.optimizer.step(before_update=lambda: self._losses.check(self.global_steps + 1))
                finally:
                    self._losses.reset()
            self._step_applied = applied
            if applied:
                self._skips.record_applied()
                if self.lr_scheduler is not None:
                    self.lr_scheduler.step(**(lr_kwargs or {}))
            else:
                self.skipped_steps += 1
                after = self.optimizer.loss_scale
                self._skips.record_skipped(self.global_steps + 1,
                                           f"loss scale {scale:g} -> {after:g}" if self.fp16_enabled() else "")
        except BaseException as error:
            self._post_failure("step", error)
            # updated, but the scheduler and the count not: as half applied as a failure inside the update
            self._mark_if_half_applied(error, applied or self.optimizer.part_applied)
            raise
        self.global_steps += 1
        self.global_samples += self.train_batch_size()
        self._pinning.end_step()

    def _mark_if_half_applied(self, error: BaseException, part_applied: bool) -> None:
        if not part_applied:
            return
        self._order.half_applied = half_applied(self.global_steps + 1, error)
        _LOGGER.error("%s", self._order.half_applied)  # the error itself goes on unchanged: callers catch its kind

    def _post(self, phase: str) -> None:
        """Say where this rank is (the store's progress board): a peer whose collective fails names it."""
        self._comm.progress.post(f"step {self.global_steps + 1} {phase} (micro-step {self.micro_steps + 1})")

    def _post_failure(self, phase: str, error: BaseException) -> None:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        self._comm.progress.post(f"failed in {phase} at step {self.global_steps + 1}: {type(error).__name__}"
                                 + (f": {message[:200]}" if message else ""))

    def zero_grad(self, set_to_none: bool = True) -> None:  # torch.nn.Module's signature
        """Drop accumulated gradients (the step already does this after each update); a backward may follow."""
        self._order.backward_pending = False
        self._order.accumulated = 0
        self._losses.reset()
        self.optimizer.zero_grad(set_to_none=set_to_none)

    # --- figures, under DeepSpeed's names ---
    def was_step_applied(self) -> bool:
        """True if the latest `step()` updated the parameters (False between accumulation boundaries and on overflow)."""
        return self._step_applied

    # The three batch settings are None only in a config that load_config(..., world_size=N) has not
    # resolved (initialize always resolves it); int() still refuses None at run time.
    def train_batch_size(self) -> int:
        return int(cast(int, self.zero_config.train_batch_size))

    def train_micro_batch_size_per_gpu(self) -> int:
        return int(cast(int, self.zero_config.train_micro_batch_size_per_gpu))

    def gradient_accumulation_steps(self) -> int:
        return int(cast(int, self.zero_config.gradient_accumulation_steps))

    def gradient_clipping(self) -> float:
        return float(self.zero_config.gradient_clipping)

    def fp16_enabled(self) -> bool:
        return self.zero_config.compute_dtype == "fp16"

    def bfloat16_enabled(self) -> bool:
        return self.zero_config.compute_dtype == "bf16"

    def zero_optimization_stage(self) -> int:
        return self.policy.stage

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_global_grad_norm(self) -> float | None:
        return self.optimizer.get_global_grad_norm()

    def module_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's whole weights and buffers (compute dtype, on CPU) on rank 0; an empty dict on other ranks.

        Every rank must call it: at stage 3 the units are gathered one at a time.
        """
        self._order.check_whole("module_state_dict")
        self._order.check_states_present("module_state_dict")
        return self._passes.full_state_dict()

    # --- checkpoints ---
    def save_checkpoint(self, save_dir: str | os.PathLike[str], tag: object = None,
                        client_state: dict[str, Any] | None = None, *, save_latest: bool = True,
                        exclude_frozen_parameters: bool = False, async_save: bool = False) -> str:
        """DeepSpeed's call: the whole training state to `<save_dir>/<tag>` (docs/checkpoints.md). Every rank calls
        it; what it writes loads at any world size and stage. `async_save=True` (zero's own) returns once the
        save has begun and writes it while training goes on; `wait_for_checkpoint()` waits for it."""
        from ..checkpoint import begin_save, write_save

        self._order.check_whole("save_checkpoint")
        self._order.check_states_present("save_checkpoint")
        self._saver.wait()  # first: the running save holds its save_dir's lock until it is published
        pending = begin_save(self, Path(save_dir), tag, client_state, save_latest, exclude_frozen_parameters)
        if async_save:
            self._saver.start(pending)
            return str(pending.save_dir / pending.tag)
        return str(write_save(pending))

    def wait_for_checkpoint(self) -> str | None:
        """Block until an asynchronous save is published; its directory, or None when none was started."""
        last = self._saver.wait()
        return str(last) if last is not None else None

    def load_checkpoint(self, load_dir: str | os.PathLike[str], tag: str | None = None, *,
                        load_module_strict: bool = True, load_optimizer_states: bool = True,
                        load_lr_scheduler_states: bool = True,
                        load_module_only: bool = False, trust_checkpoint: bool = False) -> tuple[str, dict[str, Any]]:
        """DeepSpeed's call: returns (the checkpoint's path, the client_state saved with it). Opening it runs no code
        the checkpoint names; `trust_checkpoint=True` (zero's own) lifts that, for sources you trust."""
        from ..checkpoint import load_checkpoint

        self._order.check_states_present("load_checkpoint")
        self._order.check_no_gradients("load_checkpoint")
        self._saver.wait()
        loaded = load_checkpoint(self, Path(load_dir), tag, load_module_strict, load_optimizer_states,
                                 load_lr_scheduler_states, load_module_only, trust_checkpoint)
        self._order.half_applied = None  # the weights are the checkpoint's now
        self.optimizer.discard_failed_step()
        return loaded

    def memory_report(self) -> MemoryReport:
        """The ledger per device, current and peak bytes per category, and the collectives' bytes."""
        setup = LeverSetup(self.policy.stage, self.world_size, optimizer_offloaded=self.policy.optimizer_offloaded,
                           parameters_offloaded=self.policy.parameters_offloaded)
        return self.ledger.report(pinned=pinned_stats(), setup=setup, pinning=self._pinning.per_step())

    def track_memory(self, enabled: bool = True) -> None:
        """Attribute memory the engine does not own (activations, temporaries) during forward, backward
        and step, with a storage tracker, and measure each phase's peak at the allocator beside the ledger's
        (on CPU this starts zero-pin's count of the CPU allocator). Exact, but it adds a Python call to every op."""
        if enabled and self.ledger.ruler is None:
            accelerator = get_accelerator()
            accelerator.count_allocations()
            self.ledger.set_ruler(accelerator.allocator_ruler())
        self.ledger.set_tracking(enabled)

    def destroy(self) -> None:
        """Remove the engine's hooks (gradient reduction; at stage 3, gathering) from the model, and release
        what offload devices hold outside memory (NVMe swap files), after an asynchronous save has finished; a save
        that failed is raised (CheckpointError) after all of that, so a new engine can wrap the model."""
        self._order.destroyed = True
        if self._interrupts is not None:  # a backward that stepped, with no step() after it
            self._interrupts.__exit__(None, None, None)
            self._interrupts = None
        self.module.__dict__.pop(WRAPPED_ATTRIBUTE, None)  # the model may be wrapped again
        try:
            self._saver.wait()  # a failed asynchronous save is raised once the model is free of the engine
        finally:
            self._reducer.remove_hooks()
            self._passes.remove_hooks()
            self._homes.close()
            self._pinning.close()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is None:
                raise
            try:
                return getattr(module, name)
            except AttributeError:
                # Name both objects: the model's own error would hide that the engine was asked first.
                raise AttributeError(f"neither the {type(self).__name__} nor its model ({type(module).__name__}) "
                                     f"has an attribute {name!r}") from None
