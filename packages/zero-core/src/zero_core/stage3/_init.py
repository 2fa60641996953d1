"""`zero_core.Init`: build a model with its parameters partitioned as each module is created.

Inside the block, the `__init__` of every nn.Module class is wrapped: when a module's
outermost `__init__` returns, its own parameters (those above
`stage3_param_persistence_threshold`) are broadcast from rank 0 and cut into one unit, of
which this rank keeps its shard, in the parameters' own dtype so the engine's fp32 master
is exact. So a rank holds at most one module's whole parameters at a time, plus its shards.
`zero_core.initialize` later regroups the shards into its own units, one module at a time.
Weights set by code that runs after construction (a Hugging Face `post_init`) must go
through `GatheredParameters(..., modifier_rank=0)`.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from ..accelerator import get_accelerator
from ..config import load_config
from ..comm import Collectives, ensure_process_group
from ..memory import MemoryLedger
from ._unit import ParamUnit, unit_of

_state = threading.local()


class Init:
    def __init__(
        self,
        module: torch.nn.Module | None = None,
        config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        config_dict_or_path: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        enabled: bool = True,
    ) -> None:
        """`config` (or DeepSpeed's `config_dict_or_path`): the ds_config, for the persistence threshold.

        `module`: partition an already-built model now instead of wrapping construction.
        """
        self.enabled = enabled
        if not enabled:
            return
        accelerator = get_accelerator()
        ensure_process_group(accelerator)
        source = config if config is not None else config_dict_or_path
        loaded = load_config(source if source is not None else {"train_micro_batch_size_per_gpu": 1},
                             world_size=dist.get_world_size())
        self.threshold = loaded.zero_optimization.stage3_param_persistence_threshold
        self.ledger = MemoryLedger()  # the shards' memory until initialize takes them over
        self._comm = Collectives(self.ledger)
        self._device = accelerator.device(accelerator.current_device())
        self._patched: list[tuple[type, Any]] = []
        if module is not None:
            for child in module.modules():
                self.partition(child)

    def partition(self, module: torch.nn.Module) -> None:
        """Partition `module`'s own parameters that are still whole and above the threshold."""
        params = [p for p in module._parameters.values()
                  if p is not None and unit_of(p) is None and p.numel() > self.threshold]
        with torch.no_grad():
            for param in params:
                if self._comm.world_size > 1:
                    self._comm.broadcast(param.data)
        whole = [weakref.ref(p.data.untyped_storage()) for p in params]
        for dtype in dict.fromkeys(p.dtype for p in params):
            same = [p for p in params if p.dtype == dtype]
            ParamUnit(type(module).__name__, same, self._comm, dtype, self.ledger, self._device)
        _await_release(whole)

    def __enter__(self) -> Init:
        if not self.enabled:
            return self
        for cls in _subclasses(torch.nn.Module):
            if "__init__" in cls.__dict__:
                self._wrap(cls)
        self._original_init_subclass = torch.nn.Module.__dict__.get("__init_subclass__")
        init = self

        def init_subclass(cls: type, **kwargs: Any) -> None:  # classes defined inside the block
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            if "__init__" in cls.__dict__:
                init._wrap(cls)

        torch.nn.Module.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self.enabled:
            return
        for cls, original in reversed(self._patched):
            cls.__init__ = original
        self._patched.clear()
        if self._original_init_subclass is None:
            del torch.nn.Module.__init_subclass__
        else:
            torch.nn.Module.__init_subclass__ = self._original_init_subclass

    def _wrap(self, cls: type) -> None:
        original = cls.__dict__["__init__"]
        init = self

        def wrapped(module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            depth = _depths().get(id(module), 0)
            _depths()[id(module)] = depth + 1
            try:
                original(module, *args, **kwargs)
            finally:
                if depth == 0:
                    del _depths()[id(module)]
                else:
                    _depths()[id(module)] = depth
            if depth == 0:  # the outermost __init__ of this module has returned: its parameters exist
                init.partition(module)

        wrapped.__wrapped__ = original  # type: ignore[attr-defined]
        cls.__init__ = wrapped
        self._patched.append((cls, original))


def _depths() -> dict[int, int]:
    if not hasattr(_state, "depths"):
        _state.depths = {}
    return _state.depths


def _subclasses(cls: type) -> list[type]:
    found, stack = [], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return found


def _await_release(storages: list[weakref.ref], timeout: float = 1.0) -> None:
    """Give gloo a moment to drop the whole parameters it broadcast.

    gloo's worker thread releases a communicated tensor shortly after the call returns; until
    it does, the module's whole parameters stay alive and would overlap the next module's,
    breaking the bound of one whole module at a time. The wait is bounded: a caller that
    still holds a whole parameter itself only delays the build by `timeout`.
    """
    deadline = time.monotonic() + timeout
    while any(ref() is not None for ref in storages) and time.monotonic() < deadline:
        time.sleep(0.0005)
