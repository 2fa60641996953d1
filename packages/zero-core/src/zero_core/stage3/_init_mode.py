"""The torch-function mode active inside a `zero_core.Init` block.

Once a module's construction returns, its parameters are partitioned: their `.data` is an
empty tensor, and whatever code touches them next would read or write nothing. This mode
sees every torch call made in the block (`nn.init.*`, in-place ops, `.data` and `.shape`
reads, `dim()`, indexing, `.data = ...`), and before running one that involves a
partitioned parameter of Init's, has `InitUnits` gather that parameter's unit, so the call
runs on the whole tensor exactly as in eager construction (and draws the same random
numbers, in the same order). Reads of attributes that do not depend on the values
(`dtype`, `requires_grad`, ...) gather nothing.

Setting `.data` copies the new value into the gathered parameter, so its shape and dtype
cannot change. A tensor taken from a parameter whose unit has since been stored is a stale
alias (_init_stale.py): writing through it reaches the unit; using it once the unit has
changed is an error. Errors name parameters by their fully qualified name.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from zero_plugins import ZeroError

from ._init_names import ModelNames
from ._init_stale import StaleBuffer
from ._init_units import InitUnits
from ._unit import ParamUnit

# Tensor attributes that a partitioned parameter answers correctly without its values.
_METADATA = frozenset({
    "dtype", "device", "layout", "requires_grad", "grad", "grad_fn", "is_leaf", "retains_grad", "name", "names",
    "is_cuda", "is_cpu", "is_meta", "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "itemsize", "output_nr",
    "_backward_hooks", "_post_accumulate_grad_hooks", "_version",
})


class InitMode(TorchFunctionMode):
    def __init__(self, units: InitUnits, names: ModelNames) -> None:
        super().__init__()
        self._units = units
        self._names = names
        self._paused = 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Init's own work (partitioning, storing) runs while the mode is on the stack and must pass through."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        attribute = _attribute(func)
        if self._paused or attribute in _METADATA:
            return func(*args, **kwargs)
        tensors = list(_tensors((*args, *kwargs.values())))
        units = list(dict.fromkeys(u for t in tensors if (u := self._units.managed(t)) is not None))
        stale = self._check_stale(tensors, units)
        self._units.gather(units)
        if attribute == "data" and func.__name__ == "__set__" and self._units.managed(args[0]) is not None:
            self._set_data(args[0], args[1])
            result = None
        else:
            result = func(*args, **kwargs)
        self._units.write_through(stale)
        return result

    def _set_data(self, param: torch.nn.Parameter, value: torch.Tensor) -> None:
        """`param.data = value` on a gathered parameter: copy, since the unit's buffer holds its values."""
        whole = param.data
        if value.shape != whole.shape or value.dtype != whole.dtype:
            name = self._names.of(param)
            raise ZeroError(
                f"zero_core.Init: setting {name}.data to a {value.dtype} tensor of shape {tuple(value.shape)}, but "
                f"{name} is partitioned as {whole.dtype} {tuple(whole.shape)} and cannot change shape or dtype; build "
                "the module with its final shape and dtype (torch.set_default_dtype, or the model's dtype argument), "
                "or build this model without zero_core.Init")
        with torch.no_grad():
            whole.copy_(value)

    def _check_stale(self, tensors: list[torch.Tensor], units: list[ParamUnit]) -> list[StaleBuffer]:
        found = self._units.stale.among(tensors)
        for tensor, stale in found:
            if not self._units.is_current(stale) or stale.unit in units:
                name = self._names.of(stale.param_at(tensor))
                raise ZeroError(
                    f"zero_core.Init: a tensor taken from {name} (its .data or a view) is used after {name} was "
                    "gathered again, so it may hold outdated values (Init holds one module's parameters whole at a "
                    "time); take it from the parameter again right before using it, or gather the parameters "
                    "together in zero_core.GatheredParameters([...], modifier_rank=0)")
        return list({id(stale): stale for _, stale in found}.values())


def _attribute(func: Any) -> str | None:
    """The attribute a `Tensor.<attribute>` getter or setter reads or writes; None for other calls."""
    if getattr(func, "__name__", None) in ("__get__", "__set__"):
        return getattr(func.__self__, "__name__", None)
    return None


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)
        elif isinstance(value, dict):
            yield from _tensors(value.values())
