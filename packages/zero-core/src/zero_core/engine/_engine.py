"""ZeroEngine: DeepSpeed's training loop (`engine(batch)`, `engine.backward(loss)`, `engine.step()`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from zero_plugins import ZeroError

from ..memory.ledger import MemoryLedger
from ..memory.report import MemoryReport
from ..memory.see_memory import pinned_stats
from ._optimizer import ZeroOptimizer
from ._reducer import GradReducer

if TYPE_CHECKING:
    from ..config import ZeroConfig


@dataclass(frozen=True)
class EngineParts:
    """What a builder assembles for an engine; one bundle, so that every engine class takes the same."""

    module: torch.nn.Module
    config: ZeroConfig
    optimizer: ZeroOptimizer
    lr_scheduler: Any
    reducer: GradReducer
    ledger: MemoryLedger
    device: torch.device
    dtype: torch.dtype
    training_dataloader: torch.utils.data.DataLoader | None = None


class ZeroEngine(torch.nn.Module):
    """Wraps the model. Call `step()` after every `backward()`: it steps the optimizer only at
    the gradient-accumulation boundary, as DeepSpeed's does. Attributes the engine lacks are
    looked up on the model, so `engine.generate(...)` or `engine.config` reach a Hugging Face model.
    """

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
        self.micro_steps = 0
        self.global_steps = 0
        self.global_samples = 0
        self.skipped_steps = 0
        self._reducer = parts.reducer

    # --- the training loop ---
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.ledger.phase("forward"):
            return self.module(*args, **kwargs)

    def backward(self, loss: torch.Tensor, retain_graph: bool = False, scale_wrt_gas: bool = True) -> torch.Tensor:
        """Backward of `loss / gradient_accumulation_steps` (times the fp16 loss scale); returns `loss`.

        At the accumulation boundary the gradients are averaged across ranks when this returns.
        `scale_wrt_gas=False` skips the division, for a loss the caller has already divided (DeepSpeed's flag).
        """
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ZeroError("engine.backward needs the loss as a tensor with one element (reduce it with .mean() "
                            "or .sum() first)")
        scaled = loss.float()
        accumulation = self.gradient_accumulation_steps()
        if accumulation > 1 and scale_wrt_gas:
            scaled = scaled / accumulation
        scale = self.optimizer.loss_scaler.scale
        if scale != 1.0:
            scaled = scaled * scale
        with self.ledger.phase("backward"):
            for group in self.optimizer.groups:
                group.grads.attach()
            self._reducer.begin(reduce=self.is_gradient_accumulation_boundary())
            try:
                scaled.backward(retain_graph=retain_graph)
            except BaseException:
                self._reducer.abort()
                raise
            self._reducer.end()
        return loss

    def step(self, lr_kwargs: dict[str, Any] | None = None) -> None:
        """Count one micro-batch; at the boundary, step the optimizer and then the LR scheduler.

        An fp16 overflow skips the optimizer step and the scheduler step (`skipped_steps` counts them).
        """
        if self.is_gradient_accumulation_boundary():
            with self.ledger.phase("step"):
                applied = self.optimizer.step()
            if applied:
                if self.lr_scheduler is not None:
                    self.lr_scheduler.step(**(lr_kwargs or {}))
            else:
                self.skipped_steps += 1
            self.global_steps += 1
            self.global_samples += self.train_batch_size()
        self.micro_steps += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop accumulated gradients (the step already does this after each update)."""
        self.optimizer.zero_grad(set_to_none)

    def is_gradient_accumulation_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.gradient_accumulation_steps() == 0

    # --- figures ---
    def train_batch_size(self) -> int:
        return int(self.zero_config.train_batch_size)

    def train_micro_batch_size_per_gpu(self) -> int:
        return int(self.zero_config.train_micro_batch_size_per_gpu)

    def gradient_accumulation_steps(self) -> int:
        return int(self.zero_config.gradient_accumulation_steps)

    def zero_optimization_stage(self) -> int:
        return self.zero_config.zero_optimization.stage

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_global_grad_norm(self) -> float | None:
        return self.optimizer.get_global_grad_norm()

    def memory_report(self) -> MemoryReport:
        """The ledger per device, current and peak bytes per category, and the collectives' bytes."""
        return self.ledger.report(pinned=pinned_stats())

    def track_memory(self, enabled: bool = True) -> None:
        """Attribute memory the engine does not own (activations, temporaries) during forward, backward
        and step, with a storage tracker. Exact, but it adds a Python call to every op."""
        self.ledger.set_tracking(enabled)

    def destroy(self) -> None:
        """Remove the gradient hooks from the model's parameters."""
        self._reducer.remove_hooks()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules", {})
            if "module" in modules:
                return getattr(modules["module"], name)
            raise
