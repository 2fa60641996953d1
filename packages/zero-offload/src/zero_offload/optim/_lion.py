"""CPULion: DeepSpeedCPULion's constructor over the fused op, or torch's foreach kernels tiled to stay in cache."""
from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch

from ._base import CPUOptimizer, NativeKernel
from ._checks import check_betas, check_lr, check_weight_decay
from ._lists import Kernel, StepLists
from ._native import native_arguments
from ._threads import for_each_tile


class CPULion(CPUOptimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") over CPU tensors,
    a drop-in for DeepSpeed's DeepSpeedCPULion.

    Per step, with decoupled weight decay as in the paper:
        p = p * (1 - lr * weight_decay)
        p = p - lr * sign(lerp(m, g, 1 - beta1))
        m = lerp(m, g, 1 - beta2)
    The fused op (see _native) does it in one pass. torch has no Lion kernel: without the op this
    runs torch's foreach ops a cache-sized tile at a time, so the five passes read memory once, and
    spreads the tiles over torch.get_num_threads() threads. State is `exp_avg` and `step`
    (DeepSpeed also allocates an unused `exp_avg_sq`).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_lr(group["lr"])
        check_betas(group["betas"])
        check_weight_decay(group["weight_decay"])

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg",)

    def _kernel(self, group: dict[str, Any]) -> Kernel:
        lr, weight_decay = float(group["lr"]), float(group["weight_decay"])
        beta1, beta2 = (float(beta) for beta in group["betas"])

        def step_tile(tile: StepLists) -> None:
            params, grads, exp_avgs = tile.params, tile.grads, tile.states[0]
            if weight_decay:  # multiplying by 1.0 would change nothing
                torch._foreach_mul_(params, 1 - lr * weight_decay)
            direction = torch._foreach_lerp(exp_avgs, grads, 1 - beta1)
            torch._foreach_sign_(direction)
            torch._foreach_add_(params, direction, alpha=-lr)
            torch._foreach_lerp_(exp_avgs, grads, 1 - beta2)

        return lambda lists: for_each_tile(step_tile, lists)

    def _native_kernel(self, op: ModuleType, group: dict[str, Any]) -> NativeKernel:
        beta1, beta2 = (float(beta) for beta in group["betas"])

        def kernel(storage: int, lists: StepLists) -> None:
            pointers, numels = native_arguments(lists)
            op.lion_step(storage, pointers, numels, float(group["lr"]), beta1, beta2, float(group["weight_decay"]))

        return kernel
