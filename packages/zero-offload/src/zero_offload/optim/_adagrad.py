"""CPUAdagrad: DeepSpeedCPUAdagrad's constructor over the fused op, or torch's fused CPU Adagrad kernel."""
from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch

from ._base import CPUOptimizer, NativeKernel
from ._checks import check_eps, check_lr, check_weight_decay
from ._lists import Kernel, StepLists
from ._native import native_arguments


class CPUAdagrad(CPUOptimizer):
    """Adagrad over CPU tensors, a drop-in for DeepSpeed's DeepSpeedCPUAdagrad.

    Results equal torch.optim.Adagrad(fused=True) (lr_decay=0, initial_accumulator_value=0) within
    an ulp or so with the fused op (see _native), bit for bit with torch's kernel; weight_decay is
    L2, added to the gradient, as in both. State is torch's: `sum` and `step`.
    amsgrad is kept in the signature for DeepSpeed configs but has no meaning for Adagrad: True raises.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0,
        amsgrad: bool = False,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_lr(group["lr"])
        check_eps(group["eps"])
        check_weight_decay(group["weight_decay"])
        if group["amsgrad"]:
            # DeepSpeedCPUAdagrad accepts amsgrad=True and ignores it; failing says so.
            raise ValueError("amsgrad must be False: Adagrad has no AMSGrad variant")

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("sum",)

    def _kernel(self, group: dict[str, Any]) -> Kernel:
        def kernel(lists: StepLists) -> None:
            torch._fused_adagrad_(lists.params, lists.grads, lists.states[0], lists.steps,
                                  lr=float(group["lr"]), lr_decay=0.0,
                                  weight_decay=float(group["weight_decay"]), eps=float(group["eps"]),
                                  maximize=False)

        return kernel

    def _native_kernel(self, op: ModuleType, group: dict[str, Any]) -> NativeKernel:
        def kernel(storage: int, lists: StepLists) -> None:
            pointers, numels = native_arguments(lists)
            op.adagrad_step(storage, pointers, numels, float(group["lr"]), float(group["eps"]),
                            float(group["weight_decay"]))

        return kernel
