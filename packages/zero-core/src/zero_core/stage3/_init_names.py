"""Fully qualified names for `zero_core.Init`'s units and parameters.

A module does not know its name while it is built: its parent attaches it later. So units
start under their module's class name and are renamed once an outermost construction
returns, by walking that finished root's `named_modules`; error messages look the
parameter up in the model being built (or the last ones built) at the moment they fire.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from ._unit import ParamUnit, unit_of


class ModelNames:
    def __init__(self) -> None:
        self._building: list[torch.nn.Module] = []  # modules whose outermost __init__ runs, outermost first
        self._roots: list[weakref.ref[torch.nn.Module]] = []  # finished outermost modules, newest last

    def started(self, module: torch.nn.Module) -> None:
        self._building.append(module)

    def ended(self, module: torch.nn.Module) -> None:
        self._building = [other for other in self._building if other is not module]

    def root_finished(self, root: torch.nn.Module, is_ours: Callable[[ParamUnit], bool]) -> None:
        """Name each of Init's units after the first module of `root` that registers its parameters."""
        inside = set(map(id, root.modules()))
        self._roots = [ref for ref in self._roots if (old := ref()) is not None and id(old) not in inside]
        self._roots.append(weakref.ref(root))
        named: set[int] = set()
        for name, module in root.named_modules():
            for param in module._parameters.values():
                unit = unit_of(param) if param is not None else None
                if unit is not None and id(unit) not in named and is_ours(unit):
                    unit.name = name or type(root).__name__
                    named.add(id(unit))

    def of(self, param: torch.Tensor) -> str:
        """`param`'s fully qualified name in the model being built, or in the last one built."""
        roots = [root for ref in reversed(self._roots) if (root := ref()) is not None]
        for root in [*self._building[:1], *roots]:
            for name, candidate in root.named_parameters(remove_duplicate=False):
                if candidate is param:
                    return name
        unit = unit_of(param)
        return f"a parameter of {unit.name}" if unit is not None else "a parameter"
