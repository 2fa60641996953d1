"""The torch-function mode active while a stage-3 model's modules run.

ModuleHooks enters it when the outermost module starts (in forward, and again when
activation checkpointing re-runs a forward inside backward) and leaves it when that module
returns. It sees every torch call the model makes, and:
- hands each partitioned parameter about to be read to `ModuleHooks.use`, which gathers it
  if no running module holds it (a tied or borrowed weight used outside its own module);
- with `memory_efficient_linear`, routes `F.linear` on a partitioned weight through
  `GatheredLinear`, which saves the parameter rather than a view of the gathered weight.
Attribute reads and writes (`weight.dtype`, `weight.data = ...`) are not uses and gather nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._coordinator import GatherCoordinator
from ._linear import GatheredLinear
from ._unit import unit_of

_LINEAR = (F.linear, torch._C._nn.linear)


class Stage3Mode(TorchFunctionMode):
    def __init__(self, use: Callable[[torch.Tensor], None], efficient_linear: GatherCoordinator | None) -> None:
        """`efficient_linear`: the coordinator that re-gathers weights in backward, or None to keep F.linear."""
        super().__init__()
        self._use = use
        self._coordinator = efficient_linear

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in ("__get__", "__set__"):
            return func(*args, **kwargs)
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.nn.Parameter):
                self._use(value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, torch.nn.Parameter):
                        self._use(item)
        if self._coordinator is not None and func in _LINEAR:
            return self._linear(*args, **kwargs)
        return func(*args, **kwargs)

    def _linear(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        unit = unit_of(weight)
        if unit is None or not isinstance(weight, torch.nn.Parameter) or not torch.is_grad_enabled():
            return F.linear(input, weight, bias)
        # torch leaves Function.apply unannotated; mypy's untyped_calls_exclude (mypy.ini) does not cover a
        # call through a subclass. GatheredLinear.forward returns a Tensor.
        output: torch.Tensor = GatheredLinear.apply(  # type: ignore[no-untyped-call]
            input, weight, bias, unit, self._coordinator)
        return output
