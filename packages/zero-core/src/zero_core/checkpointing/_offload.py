"""`offload_saved_activations`: the tensors autograd saves inside chosen modules' forward go to host memory.

torch's `torch.autograd.graph.save_on_cpu` is the model: saved-tensor hooks (pack in forward,
unpack in backward) that copy each saved tensor to host memory and back. Here the hooks are
entered by forward pre-hooks and left by forward post-hooks of the chosen modules only, the host
buffers come from the selected zero_pin backend (through the accelerator, as `cpu_checkpointing`
pins), parameters are never copied (at stage 3 a gathered parameter is a view of its unit's
buffer), and the host copies are counted in the engine's ledger like `cpu_checkpointing`'s.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ._host import host_copy

DEFAULT_MIN_BYTES = 1024  # smaller saved tensors stay on the device: a copy costs more than they hold


class _Offloaded:
    """A saved tensor's host copy and the device it goes back to."""

    __slots__ = ("host", "device")

    def __init__(self, host: torch.Tensor, device: torch.device) -> None:
        self.host = host
        self.device = device


class OffloadHandle:
    """What `offload_saved_activations` returns: `remove()` takes the hooks off again.

    `offloaded_tensors` and `offloaded_bytes` count the host copies made so far (bytes of their storages).
    """

    def __init__(self, modules: list[torch.nn.Module], min_bytes: int) -> None:
        self.min_bytes = min_bytes
        self.offloaded_tensors = 0
        self.offloaded_bytes = 0
        self._stack: list[tuple[torch.nn.Module, contextlib.AbstractContextManager[None]]] = []
        self._handles: list[RemovableHandle] = []
        for module in modules:
            self._handles.append(module.register_forward_pre_hook(self._enter))
            self._handles.append(module.register_forward_hook(self._leave, always_call=True))

    def remove(self) -> None:
        """Remove the hooks; saved tensors already on the host still come back in their backward."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self) -> OffloadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # --- the module hooks ---
    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        parameters = _ParameterStorages(module)
        hooks = torch.autograd.graph.saved_tensors_hooks(lambda tensor: self._pack(tensor, parameters), _unpack)
        hooks.__enter__()
        self._stack.append((module, hooks))

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._stack and self._stack[-1][0] is module:
            _, hooks = self._stack.pop()
            hooks.__exit__(None, None, None)

    # --- the saved-tensor hooks ---
    def _pack(self, tensor: torch.Tensor, parameters: _ParameterStorages) -> Any:
        if not self._offloads(tensor, parameters):
            return tensor
        host = host_copy(tensor)
        self.offloaded_tensors += 1
        self.offloaded_bytes += host.untyped_storage().nbytes()
        return _Offloaded(host, tensor.device)

    def _offloads(self, tensor: torch.Tensor, parameters: _ParameterStorages) -> bool:
        # A parameter, or a view of one (`weight.t()`), also of a module not chosen (tied weights).
        if isinstance(tensor, torch.nn.Parameter) or isinstance(tensor._base, torch.nn.Parameter):
            return False
        if tensor.device.type == "meta":
            return False
        if tensor.numel() * tensor.element_size() < self.min_bytes:
            return False
        return not parameters.holds(tensor)


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, _Offloaded):
        return packed.host.to(packed.device, non_blocking=True)
    tensor: torch.Tensor = packed
    return tensor


class _ParameterStorages:
    """The storages of a module's parameters, looked at when a tensor is packed (at stage 3 a parameter's
    storage is its unit's gathered buffer, which exists only while the unit is gathered)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module

    def holds(self, tensor: torch.Tensor) -> bool:
        address = tensor.untyped_storage().data_ptr()
        return address != 0 and any(param.untyped_storage().data_ptr() == address
                                     for param in self._module.parameters())


def offload_saved_activations(module_or_modules: torch.nn.Module | Iterable[torch.nn.Module],
                              min_bytes: int = DEFAULT_MIN_BYTES) -> OffloadHandle:
    """Keep the tensors autograd saves for backward inside these modules' forward in host memory.

    Each saved tensor of at least `min_bytes` bytes that is not a parameter (nor a view of one) is
    copied into a host buffer pinned by the selected zero_pin backend (asynchronously on a CUDA
    device) and copied back to its device when backward needs it. Returns a handle whose `remove()`
    takes the hooks off. docs/activations.md, "Offloading saved activations of chosen modules".
    """
    if min_bytes < 0:
        raise ValueError(f"min_bytes must be >= 0 (got {min_bytes})")
    chosen = [module_or_modules] if isinstance(module_or_modules, torch.nn.Module) else list(module_or_modules)
    modules: list[torch.nn.Module] = []
    for module in chosen:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"offload_saved_activations takes nn.Modules, not {type(module).__name__}")
        # A ModuleList or ModuleDict is never called itself: hooks on it would never run, so choose its members.
        modules.extend(module.children() if isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)) else [module])
    return OffloadHandle(modules, min_bytes)


