"""Module hooks that gather a module's units around its forward and its backward.

- forward pre-hook: acquire the module's units (its own parameters, tied parameters it
  registers, parameters of other modules registered on it with `register_external_parameter`,
  and parameters of other modules it was seen using); forward hook: release them.
- backward: a multi-grad hook on the forward's outputs acquires the units again when the
  first gradient reaches them, before the module's backward runs; an identity autograd
  function on the forward's inputs releases them once the gradients of the inputs are made,
  i.e. after the module's backward. A module whose inputs need no gradient (the first
  layers of a model with a frozen embedding) keeps them until backward ends.
- `use(param)`: a partitioned parameter reached by an op while no running module holds its
  unit (a parameter used outside its own module's forward) is gathered on the spot, and the
  running module adopts the unit, so it is gathered with that module from then on, forward
  and backward. Ops are seen through Stage3Mode, entered when the outermost module starts
  and left when it returns, so that forwards re-run by activation checkpointing inside
  backward (where no mode entered around the first forward is active) see it too.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.utils.hooks import RemovableHandle

from ._coordinator import GatherCoordinator
from ._external import external_parameters
from ._mode import Stage3Mode
from ._unit import ParamUnit, unit_of


class _BackwardScope:
    """One forward call's units, acquired for its backward and released after it.

    `units` is the module's own list, so a unit the module adopts during this very forward
    (see `ModuleHooks.use`) is gathered for its backward too.
    """

    def __init__(self, coordinator: GatherCoordinator, units: list[ParamUnit]) -> None:
        self.coordinator = coordinator
        self.units = units
        self.acquired: list[ParamUnit] | None = None

    def pre_backward(self, *_: Any) -> None:
        if self.acquired is None:
            self.acquired = list(self.units)
            for unit in self.acquired:
                self.coordinator.acquire(unit)
        self.coordinator.release_put_off()

    def post_backward(self) -> None:
        self.coordinator.release_put_off()
        if self.acquired is not None:
            for unit in self.acquired:
                self.coordinator.release(unit)
            self.acquired = []  # released; a second call of the hooks in this backward does nothing


class _ReleaseAfterBackward(torch.autograd.Function):
    """Identity on a module's inputs; its backward runs once the inputs' gradients exist."""

    @staticmethod
    def forward(ctx: Any, scope: _BackwardScope, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.scope = scope
        return inputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        ctx.scope.post_backward()
        return (None, *grads)


class ModuleHooks:
    def __init__(self, root: torch.nn.Module, units: dict[torch.nn.Module, list[ParamUnit]],
                 coordinator: GatherCoordinator, *, memory_efficient_linear: bool) -> None:
        self._units = {module: list(found) for module, found in units.items()}
        self._mode = Stage3Mode(self.use, coordinator if memory_efficient_linear else None)
        self._mode_active = False
        self._coordinator = coordinator
        self._stack: list[tuple[torch.nn.Module, _BackwardScope | None]] = []
        self._held = Counter[ParamUnit]()  # units held by the modules on the stack
        self._handles: list[RemovableHandle] = []
        self._busy = False  # inside a hook: the engine's own tensor work is never a use of a parameter
        for module in root.modules():
            self._handles.append(module.register_forward_pre_hook(self._pre_forward, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_forward, always_call=True))

    def units(self, module: torch.nn.Module) -> list[ParamUnit]:
        return self._units.get(module, [])

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def reset(self) -> None:
        """After a pass: forget modules left on the stack by an exception."""
        self._stack.clear()
        self._held.clear()
        self._leave_mode()

    def _leave_mode(self) -> None:
        if self._mode_active:
            self._mode_active = False
            self._mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # see _pre_forward

    # --- parameters used outside their module ---
    def use(self, param: torch.Tensor) -> None:
        """An op is about to read `param`: make sure its unit is gathered and held by a running module."""
        unit = unit_of(param)
        if (unit is None or self._busy or not self._stack or self._held[unit] > 0
                or not self._coordinator.owns(unit)):
            return  # no running module (e.g. an autograd function's backward): the caller gathers what it needs
        self._busy = True
        try:
            self._coordinator.acquire(unit)
        finally:
            self._busy = False
        module = self._stack[-1][0]
        self._units.setdefault(module, []).append(unit)
        self._held[unit] += 1

    # --- hooks ---
    def _pre_forward(self, module: torch.nn.Module, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        units = self._units.setdefault(module, [])
        for param in external_parameters(module):  # registered at any time, so looked up on every call
            unit = unit_of(param)
            if unit is not None and unit not in units and self._coordinator.owns(unit):
                units.append(unit)
        self._busy = True
        try:
            for unit in units:
                self._coordinator.acquire(unit)
                self._held[unit] += 1
        finally:
            self._busy = False
        scope = _BackwardScope(self._coordinator, units) if torch.is_grad_enabled() else None
        if not self._stack and not self._mode_active:
            # torch leaves TorchFunctionMode's __enter__/__exit__ and Function.apply unannotated; mypy's
            # untyped_calls_exclude (mypy.ini) does not cover calls through a subclass.
            self._mode.__enter__()  # type: ignore[no-untyped-call]
            self._mode_active = True
        self._stack.append((module, scope))
        if scope is None or not units:
            return None  # a module without units yet releases what it adopts when backward ends
        leaves = [t for t in _tensors((args, kwargs)) if t.requires_grad]
        if not leaves:
            return None
        released: tuple[torch.Tensor, ...] = _ReleaseAfterBackward.apply(  # type: ignore[no-untyped-call]
            scope, *leaves)
        wrapped = dict(zip(map(id, leaves), released))
        return _replace(args, wrapped), _replace(kwargs, wrapped)

    def _post_forward(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not self._stack or self._stack[-1][0] is not module:
            return  # the stack was reset by an exception in this forward
        _, scope = self._stack.pop()
        if not self._stack:
            self._leave_mode()
        units = self.units(module)
        release = self._coordinator.release_soon if self._coordinator.in_backward else self._coordinator.release
        self._busy = True
        try:
            for unit in units:
                self._held[unit] -= 1
                release(unit)
        finally:
            self._busy = False
        if scope is not None and units:
            outputs = [t for t in _tensors(output) if t.requires_grad]
            if outputs:
                register_multi_grad_hook(outputs, scope.pre_backward, mode="any")


def _tensors(value: Any) -> list[torch.Tensor]:
    """Tensors in nested tuples, lists and dicts (a Hugging Face ModelOutput is a dict)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _replace(value: Any, wrapped: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return wrapped.get(id(value), value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_replace(item, wrapped) for item in value)
    if isinstance(value, list):
        return [_replace(item, wrapped) for item in value]
    if isinstance(value, dict) and type(value) is dict:
        return {key: _replace(item, wrapped) for key, item in value.items()}
    return value
