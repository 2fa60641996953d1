"""`FusedAdam`: DeepSpeed's fused Adam constructor over torch's Adam, fused on CUDA and foreach elsewhere.

torch's Adam with `decoupled_weight_decay` is its AdamW, so `adam_w_mode` picks between the two with
one class. What torch cannot do (no bias correction, AMSGrad, which DeepSpeed's kernel refuses too)
is refused, naming the argument.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from zero_plugins import ZeroError

ParamsArg = Iterable[torch.Tensor] | Iterable[dict[str, Any]]
ParamList = list[torch.Tensor] | list[dict[str, Any]]


class FusedAdam(torch.optim.Adam):
    def __init__(self, params: ParamsArg, lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, adam_w_mode: bool = True,
                 weight_decay: float = 0.0, amsgrad: bool = False, set_grad_none: bool = True) -> None:
        """DeepSpeed's arguments and defaults (weight decay 0, AdamW unless `adam_w_mode=False`)."""
        if not bias_correction:
            raise ZeroError("zero_core.ops.adam.FusedAdam(bias_correction=False) is not supported: torch's Adam "
                            "always corrects the moments' bias; drop bias_correction")
        if amsgrad:
            raise ZeroError("zero_core.ops.adam.FusedAdam(amsgrad=True) is not supported (nor by DeepSpeed's "
                            "FusedAdam); use torch.optim.AdamW(amsgrad=True)")
        listed: ParamList = list(params)  # type: ignore[assignment]  # one kind throughout, as torch requires
        on_cuda = _all_on_cuda(listed)
        super().__init__(listed, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=adam_w_mode, fused=on_cuda or None, foreach=not on_cuda or None)
        self.adam_w_mode = adam_w_mode
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """DeepSpeed's FusedAdam drops the grads unless built with `set_grad_none=False`, which zeroes them."""
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)


def _all_on_cuda(params: ParamList) -> bool:
    """Whether every tensor among `params` (tensors, or param-group dicts) is on a CUDA device."""
    tensors: list[torch.Tensor] = []
    for entry in params:
        if isinstance(entry, dict):
            group = entry.get("params", [])
            tensors.extend([group] if isinstance(group, torch.Tensor) else list(group))
        elif isinstance(entry, torch.Tensor):
            tensors.append(entry)
    return bool(tensors) and all(t.is_cuda for t in tensors)
