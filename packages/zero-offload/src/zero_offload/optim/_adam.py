"""CPUAdam: DeepSpeedCPUAdam's constructor over the fused op, or torch's fused CPU Adam/AdamW kernels."""
from __future__ import annotations

import math
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch

from ._base import CPUOptimizer, NativeKernel
from ._checks import check_betas, check_eps, check_lr, check_weight_decay
from ._lists import Kernel, StepLists
from ._native import native_arguments

# torch's kernels always divide by the bias corrections 1 - beta**step. At step 2**62 both are
# exactly 1.0 for every beta < 1 (beta**step is below half an ulp of 1), and dividing by 1.0 is
# exact: the kernels then take the step lr * m / (sqrt(v) + eps), Adam without bias correction.
# (2**62, not inf: older torch releases read the step as an int64.)
_NO_BIAS_CORRECTION_STEP = float(2**62)


class CPUAdam(CPUOptimizer):
    """Adam and AdamW over CPU tensors, a drop-in for DeepSpeed's DeepSpeedCPUAdam.

    The fused op (see _native) steps fp32, bf16 and fp16 params with fp32 states in one pass,
    within an ulp or so of torch.optim.AdamW(fused=True) (adamw_mode=True) or
    torch.optim.Adam(fused=True) (adamw_mode=False); torch's fused kernels step the rest, and
    everything when the op is off, bit for bit. 16-bit params with fp32_optimizer_states=True
    (the default) get fp32 moments; the param itself stays 16-bit and is rounded once per step.
    bias_correction=False drops the 1 - beta**t factors. amsgrad is supported (DeepSpeed rejects it).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        adamw_mode: bool = True,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, amsgrad=amsgrad)
        self.adamw_mode = adamw_mode
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_lr(group["lr"])
        check_betas(group["betas"])
        check_eps(group["eps"])
        check_weight_decay(group["weight_decay"])

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if group["amsgrad"] else ("exp_avg", "exp_avg_sq")

    def _kernel(self, group: dict[str, Any]) -> Kernel:
        fused = torch._fused_adamw_ if self.adamw_mode else torch._fused_adam_
        beta1, beta2 = group["betas"]
        amsgrad, bias_correction = bool(group["amsgrad"]), bool(group["bias_correction"])
        no_correction = torch.tensor(_NO_BIAS_CORRECTION_STEP, dtype=torch.float32)

        def kernel(lists: StepLists) -> None:
            steps = lists.steps if bias_correction else [no_correction] * len(lists.params)
            fused(lists.params, lists.grads, lists.states[0], lists.states[1],
                  lists.states[2] if amsgrad else [], steps,
                  lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2),
                  weight_decay=float(group["weight_decay"]), eps=float(group["eps"]),
                  amsgrad=amsgrad, maximize=False)

        return kernel

    def _native_kernel(self, op: ModuleType, group: dict[str, Any]) -> NativeKernel:
        lr, (beta1, beta2) = float(group["lr"]), (float(beta) for beta in group["betas"])
        amsgrad, bias_correction = bool(group["amsgrad"]), bool(group["bias_correction"])

        def kernel(storage: int, lists: StepLists) -> None:
            pointers, numels = native_arguments(lists)
            if bias_correction:  # in double, as torch's kernel computes them; the op rounds them to fp32
                steps = [step.item() for step in lists.steps]
                step_sizes = [lr / (1 - beta1**step) for step in steps]
                corrections = [1 / math.sqrt(1 - beta2**step) for step in steps]
            else:
                step_sizes, corrections = [lr] * len(numels), [1.0] * len(numels)
            op.adam_step(storage, pointers, numels, step_sizes, corrections, lr, beta1, beta2,
                         float(group["eps"]), float(group["weight_decay"]), self.adamw_mode, amsgrad)

        return kernel
