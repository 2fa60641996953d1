"""`checkpoint` (DeepSpeed's reentrant CheckpointFunction) and `non_reentrant_checkpoint`.

`checkpoint` runs the function without autograd, keeps only its inputs, and in backward runs
it again with the forward's RNG state and backpropagates through the re-run (a nested
backward, like torch's `use_reentrant=True`). With `cpu_checkpointing` the kept floating-point
inputs are copied into pinned host memory (the selected zero_pin backend; asynchronous on a
CUDA device) and copied back to their device for the re-run.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint
from torch.utils.checkpoint import get_device_states, set_device_states

from ..accelerator import get_accelerator
from ._host import host_copy
from ._settings import Settings, logger, settings



def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """DeepSpeed's `deepspeed.checkpointing.checkpoint(function, *args)`: reentrant activation checkpointing.

    Keyword arguments are passed to `function`; tensors among them take part in autograd like positional ones.
    """
    if kwargs:
        function, args = _with_kwargs(function, args, kwargs)
    all_outputs: list[Any] = []
    _CheckpointFunction.apply(function, all_outputs, settings(), torch.is_grad_enabled(), *args)  # type: ignore[no-untyped-call]
    return all_outputs[0] if len(all_outputs) == 1 else tuple(all_outputs)


def non_reentrant_checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """DeepSpeed's `non_reentrant_checkpoint(function, *args)`: torch's `use_reentrant=False` checkpointing,
    with `synchronize_checkpoint_boundary`, `profile` and `cpu_checkpointing` as `checkpoint` has them."""
    current = settings()
    _boundary(current)
    start = time.perf_counter()
    if current.cpu_checkpointing and torch.is_grad_enabled():
        devices = [arg.device if _keeps(arg) else None for arg in args]
        host_args = [_ToHost.apply(arg) if device is not None else arg  # type: ignore[no-untyped-call]
                     for arg, device in zip(args, devices)]

        def on_device(*kept: Any, **named: Any) -> Any:
            restored = [arg.to(device, non_blocking=True) if device is not None else arg
                        for arg, device in zip(kept, devices)]
            return function(*restored, **named)

        result = torch_checkpoint(on_device, *host_args, use_reentrant=False, **kwargs)
    else:
        result = torch_checkpoint(function, *args, use_reentrant=False, **kwargs)
    _boundary(current)
    _log_time(current, "forward", start)
    return result


def reset() -> None:
    """DeepSpeed frees its contiguous buffers here; zero keeps none, so there is nothing to free."""


# --- the reentrant function ---
class _Kept:
    """One input kept for the re-run: the tensor itself, or its host copy and where it came from."""

    __slots__ = ("value", "device", "requires_grad")

    def __init__(self, value: Any, device: torch.device | None, requires_grad: bool) -> None:
        self.value = value
        self.device = device  # None: kept as is
        self.requires_grad = requires_grad

    def restore(self) -> Any:
        if self.device is None:
            return self.value
        return self.value.to(self.device, non_blocking=True)


class _CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, run_function: Callable[..., Any], all_outputs: list[Any], current: Settings,
                grad_enabled: bool, *args: Any) -> Any:
        _boundary(current)
        start = time.perf_counter()
        ctx.run_function = run_function
        ctx.current = current
        ctx.cpu_rng_state = torch.get_rng_state()
        ctx.device_type = _device_type(args)
        ctx.device_ids, ctx.device_states = get_device_states(*args)
        with torch.no_grad():
            outputs = run_function(*args)
        # Offload only when a backward will run to bring the inputs back.
        offload = current.cpu_checkpointing and grad_enabled
        ctx.kept = [_to_host(arg) if offload and _keeps(arg) else _Kept(arg, None, False) for arg in args]
        tensors = _tensors_of(outputs)
        ctx.mark_non_differentiable(*[t for t in tensors if not t.is_floating_point()])
        _boundary(current)
        _log_time(current, "forward", start)
        if isinstance(outputs, torch.Tensor):
            all_outputs.append(outputs)
            return outputs
        all_outputs.extend(outputs)
        return tuple(tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError("checkpointing is not compatible with .grad() or passing an `inputs` parameter "
                               "to .backward(); use .backward() without inputs")
        current: Settings = ctx.current
        _boundary(current)
        start = time.perf_counter()
        inputs = []
        for kept in ctx.kept:
            value = kept.restore()
            if isinstance(value, torch.Tensor):
                requires_grad = kept.requires_grad if kept.device is not None else value.requires_grad
                value = value.detach().requires_grad_(requires_grad)
            inputs.append(value)
        ctx.kept = None  # the host copies die here, not with the graph
        devices = ctx.device_ids
        with torch.random.fork_rng(devices=devices, enabled=True, device_type=ctx.device_type):
            torch.set_rng_state(ctx.cpu_rng_state)
            if devices:
                set_device_states(devices, ctx.device_states, device_type=ctx.device_type)
            with torch.enable_grad():
                outputs = ctx.run_function(*inputs)
        pairs = [(out, grad) for out, grad in zip(_tensors_of(outputs), grads) if out.requires_grad]
        if not pairs:
            raise RuntimeError("none of the checkpointed function's outputs requires a gradient; "
                               "this checkpoint is not needed")
        torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])
        _boundary(current)
        _log_time(current, "backward", start)
        return (None, None, None, None,
                *[value.grad if isinstance(value, torch.Tensor) else None for value in inputs])


class _ToHost(torch.autograd.Function):
    """A tensor's pinned host copy; its gradient goes back to the tensor's device."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        ctx.device = tensor.device
        kept = _to_host(tensor)
        host: torch.Tensor = kept.value
        return host

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.to(ctx.device, non_blocking=True)


# --- helpers ---
def _keeps(value: Any) -> bool:
    """DeepSpeed's is_activation_to_checkpoint: the floating-point tensors are the activations."""
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _to_host(tensor: torch.Tensor) -> _Kept:
    return _Kept(host_copy(tensor), tensor.device, tensor.requires_grad)


def _tensors_of(outputs: Any) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [out for out in outputs if isinstance(out, torch.Tensor)]


def _device_type(args: tuple[Any, ...]) -> str:
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.device.type != "cpu":
            return arg.device.type
    return "cuda"


def _with_kwargs(function: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    keys = tuple(kwargs)
    count = len(args)

    def with_kwargs(*all_args: Any) -> Any:
        return function(*all_args[:count], **dict(zip(keys, all_args[count:])))

    return with_kwargs, (*args, *kwargs.values())


def _boundary(current: Settings) -> None:
    if current.synchronize_checkpoint_boundary:
        get_accelerator().synchronize()


def _log_time(current: Settings, what: str, start: float) -> None:
    if current.profile:
        logger.info("checkpointed %s: %.3f ms", what, (time.perf_counter() - start) * 1e3)
