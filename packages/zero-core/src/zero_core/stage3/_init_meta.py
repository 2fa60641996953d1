"""Modules that `zero_core.Init` sees built on the meta device, partitioned once their weights are assigned.

Transformers' `from_pretrained` (5.x, without DeepSpeed) builds the model under
`torch.device("meta")`, then loads each checkpoint tensor and assigns it with
`setattr(module, name, nn.Parameter(tensor))`, one parameter at a time in key order; keys
missing from the checkpoint get `torch.empty_like` placeholders the same way before
`initialize_weights` runs, and `tie_weights` assigns the tied parameter last. A meta
parameter holds no values to partition, so Init defers such a module and watches
parameter registrations (torch's global registration hook): when the last meta parameter
of a deferred module is replaced by a real (or already partitioned) one, the module's
parameters become its unit and the whole loaded tensors are freed. A rank thus holds the
shards plus the module being loaded, never the whole state dict.

Transformers also materialises checkpoint tensors on a thread pool that runs ahead of the
assignments (and of Init's collectives) and could hold the whole state dict at once; the
block switches it to its documented synchronous mode (`HF_DEACTIVATE_ASYNC_LOAD`) unless
the user set that variable.

A meta parameter still unassigned when the block ends cannot be partitioned: an error
names it (copying into a meta parameter, as `load_state_dict` without `assign=True` does,
leaves it empty).
"""
from __future__ import annotations

import os
import weakref
from typing import Any, TypeGuard

import torch
from torch.utils.hooks import RemovableHandle
from zero_plugins import ZeroError

from ._init_mode import InitMode
from ._init_names import ModelNames
from ._init_units import InitUnits
from ._unit import unit_of

ASYNC_LOAD_VARIABLE = "HF_DEACTIVATE_ASYNC_LOAD"


class MetaModules:
    def __init__(self, units: InitUnits, names: ModelNames, mode: InitMode) -> None:
        self._units = units
        self._names = names
        self._mode = mode
        self._waiting: dict[int, weakref.ref[torch.nn.Module]] = {}  # id(module) -> module with meta parameters
        self._paths: dict[int, str] = {}  # id(module) -> its path, once its root is built
        self._handle: RemovableHandle | None = None
        self._saved_variable: str | None = None

    def enter(self) -> None:
        self._handle = torch.nn.modules.module.register_module_parameter_registration_hook(self._registered)
        self._saved_variable = os.environ.get(ASYNC_LOAD_VARIABLE)
        if self._saved_variable is None:
            os.environ[ASYNC_LOAD_VARIABLE] = "1"

    def exit(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._saved_variable is None:
            os.environ.pop(ASYNC_LOAD_VARIABLE, None)

    def defer(self, module: torch.nn.Module) -> bool:
        """Wait for `module`'s values if one of its parameters is on the meta device; True if it waits."""
        if not any(_is_meta(p) for p in module._parameters.values()):
            return False
        self._waiting[id(module)] = weakref.ref(module)
        return True

    def root_finished(self, root: torch.nn.Module) -> None:
        """Remember the paths of the waiting modules in `root`: their units are made later."""
        if self._waiting:
            for path, module in root.named_modules(remove_duplicate=False):
                if self._is_waiting(module):
                    self._paths.setdefault(id(module), path or type(root).__name__)

    def check_assigned(self) -> None:
        """Partition the waiting modules left complete; raise if a parameter is still on the meta device."""
        left = [module for ref in self._waiting.values() if (module := ref()) is not None]
        for module in left:  # its last meta parameter was set to None, which torch's hook does not report
            if not any(_is_meta(p) for p in module._parameters.values()):
                params = [p for p in module._parameters.values() if p is not None]
                self._units.partition_params(self._paths.get(id(module), type(module).__name__), params, assigned=True)
        names = [self._name(m, n, p) for m in left for n, p in m._parameters.items() if _is_meta(p)]
        self._waiting.clear()
        self._paths.clear()
        if names:
            raise ZeroError(
                f"zero_core.Init: {', '.join(names)} {'is' if len(names) == 1 else 'are'} still on the meta device when "
                "the block ends, so there is nothing to partition; a module built on the meta device (under "
                "torch.device('meta'), as from_pretrained does) must have every parameter assigned inside the block "
                "(setattr with a real tensor, load_state_dict(..., assign=True)): copying into a meta parameter keeps "
                "no values")

    def _registered(self, module: torch.nn.Module, name: str, param: Any) -> None:
        """torch's hook, called before `module.<name> = param` takes effect; partitions a complete module."""
        if not self._is_waiting(module):
            return
        params = [p for other, p in module._parameters.items() if other != name and p is not None]
        if param is not None:
            params.append(param)
        if any(_is_meta(p) for p in params):
            return
        del self._waiting[id(module)]
        path = self._paths.pop(id(module), type(module).__name__)
        with self._mode.paused():
            self._units.flush()  # one module whole at a time
            self._units.partition_params(path, params, assigned=True)

    def _is_waiting(self, module: torch.nn.Module) -> bool:
        ref = self._waiting.get(id(module))
        return ref is not None and ref() is module

    def _name(self, module: torch.nn.Module, name: str, param: torch.Tensor) -> str:
        found = self._names.of(param)
        path = self._paths.get(id(module))
        return found if found != "a parameter" or path is None else f"{path}.{name}".removeprefix(".")


def _is_meta(param: torch.Tensor | None) -> TypeGuard[torch.Tensor]:
    return param is not None and unit_of(param) is None and param.device.type == "meta"


def meta_parameter_names(module: torch.nn.Module) -> list[str]:
    return [name for name, p in module.named_parameters(remove_duplicate=False) if _is_meta(p)]
