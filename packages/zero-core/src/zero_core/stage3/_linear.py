"""Memory-efficient linear: saves the parameter itself for backward and gathers it again there.

The stock `F.linear` saves `weight.t()` for the gradient of its input. That is a view of
the gathered buffer, so releasing the parameter frees nothing until backward: the whole
16-bit model accumulates in memory during forward (docs/cases/stage3-vs-stage2.md). This
function saves the Parameter object instead. Its `.data` is emptied on release and the
storage dies; in backward the weight's unit is acquired again (normally already gathered by
the module's pre-backward hook) before the gradients are computed.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ._coordinator import GatherCoordinator
from ._unit import ParamUnit


class GatheredLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.nn.Parameter, bias: torch.Tensor | None,
                unit: ParamUnit, coordinator: GatherCoordinator) -> torch.Tensor:
        # The input is needed only for the weight's gradient (a frozen base weight needs none).
        ctx.save_for_backward(input if ctx.needs_input_grad[1] else None, weight, bias)
        ctx.unit = unit
        ctx.coordinator = coordinator
        return F.linear(input, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        with ctx.coordinator.available(ctx.unit):
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.matmul(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.reshape(-1, grad_output.shape[-1]).t().matmul(
                    input.reshape(-1, input.shape[-1]))
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0)
        return grad_input, grad_weight, grad_bias, None, None
