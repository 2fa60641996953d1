"""`zero_core.Init`: build a model with its parameters partitioned as each module is created.

Inside the block, the `__init__` of every nn.Module class is wrapped: when a module's
outermost `__init__` returns, its parameters (those above
`stage3_param_persistence_threshold`, including any its code registered on submodules
already built) are broadcast from rank 0 and cut into one unit, of which this rank keeps
its shard, in the parameters' own dtype so the engine's fp32 master is exact.

Code that touches parameters after their module was built (a Hugging Face `post_init`
running `_init_weights` and `tie_weights`, a parent re-initialising a child) runs under
`InitMode` (_init_mode.py), which gathers the touched unit first, so the model ends with
exactly the weights eager construction gives it; the unit is stored (from rank 0) and freed
when another unit is touched, when a module's construction starts or returns, and when the
block ends. So a rank holds at most one module's whole parameters at a time, plus its
shards. A module built on the meta device (as transformers' `from_pretrained` builds one) is
partitioned once its weights are assigned, as they are loaded (_init_meta.py). Units are
named after their modules' fully qualified names once the outermost module is built.
`zero_core.initialize` later regroups the shards into its own units, one module at a time.
Weights changed after the block ends must go through `GatheredParameters(..., modifier_rank=0)`.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from zero_plugins import ZeroError

from ..accelerator import get_accelerator
from ..comm import Collectives, ensure_process_group
from zero_plugins.ds_config import load_config, read_config_file
from ..memory import MemoryLedger
from ._init_meta import MetaModules, meta_parameter_names
from ._init_mode import InitMode
from ._init_names import ModelNames
from ._init_units import InitUnits


def _zero_block(source: str | os.PathLike[str] | Mapping[str, Any] | None) -> Any:
    """The ds_config reduced to its zero_optimization block, the only one Init reads (`initialize` reads the whole).

    transformers hands Init the Trainer's config before it fills in the scheduler's "auto" (warmup and total
    steps, known once the Trainer has the model), and DeepSpeed's Init takes it so.
    """
    minimal: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1}
    raw: Any = source
    if isinstance(source, (str, os.PathLike)) and isinstance(os.fspath(source), str) \
            and not os.fspath(source).lstrip().startswith("{"):
        raw = read_config_file(Path(source))
    if not isinstance(raw, Mapping):
        return minimal if raw is None else raw  # load_config names what is wrong with anything else
    return {**minimal, **({"zero_optimization": raw["zero_optimization"]} if "zero_optimization" in raw else {})}


class _InitState(threading.local):
    depths: dict[int, int]  # id(module) -> how deep its __init__ calls are nested; set on first use per thread


_state = _InitState()


class Init:
    def __init__(
        self,
        module: torch.nn.Module | None = None,
        config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        config_dict_or_path: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
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
        loaded = load_config(_zero_block(source))
        self.threshold = loaded.zero_optimization.stage3_param_persistence_threshold
        self.ledger = MemoryLedger()  # the shards' memory until initialize takes them over
        device = accelerator.device(accelerator.current_device())
        self._units = InitUnits(Collectives(self.ledger), self.ledger, device, self.threshold)
        self._names = ModelNames()
        self._mode = InitMode(self._units, self._names)
        self._meta = MetaModules(self._units, self._names, self._mode)
        self._patched: list[tuple[type, Any]] = []
        if module is not None:
            if meta := meta_parameter_names(module):
                raise ZeroError(f"zero_core.Init(module=...): {', '.join(meta)} on the meta device hold no values to "
                                "partition; load the weights first, or build the model inside the Init block")
            for child in module.modules():
                self._units.partition(child)

    def __enter__(self) -> Init:
        if not self.enabled:
            return self
        for cls in _subclasses(torch.nn.Module):
            if "__init__" in cls.__dict__:
                self._wrap(cls)
        self._original_init_subclass = torch.nn.Module.__dict__.get("__init_subclass__")
        init = self

        def init_subclass(cls: type[torch.nn.Module], /, **kwargs: Any) -> None:  # classes defined inside the block
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            if "__init__" in cls.__dict__:
                init._wrap(cls)

        # Init patches classes (here, in __exit__ and in _wrap) with setattr: mypy rejects assigning to a method.
        setattr(torch.nn.Module, "__init_subclass__", classmethod(init_subclass))
        self._meta.enter()
        # torch leaves TorchFunctionMode's __enter__/__exit__ unannotated; mypy's untyped_calls_exclude
        # (mypy.ini) does not cover calls through a subclass.
        self._mode.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self.enabled:
            return
        self._mode.__exit__(kind, error, trace)  # type: ignore[no-untyped-call]  # see __enter__
        try:
            if kind is None:
                self._units.flush()
                self._meta.check_assigned()
                self._units.agreement.end()
            else:
                self._units.release()
        finally:
            self._meta.exit()
            for cls, original in reversed(self._patched):
                setattr(cls, "__init__", original)
            self._patched.clear()
            if self._original_init_subclass is None:
                del torch.nn.Module.__init_subclass__
            else:
                setattr(torch.nn.Module, "__init_subclass__", self._original_init_subclass)

    def _wrap(self, cls: type) -> None:
        original = cls.__dict__["__init__"]
        init = self

        @functools.wraps(original)  # keeps the signature and docstring that transformers' auto_docstring reads
        def wrapped(module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            depth = _depths().get(id(module), 0)
            if depth == 0:
                init._starting(module)
            _depths()[id(module)] = depth + 1
            try:
                original(module, *args, **kwargs)
            finally:
                if depth == 0:
                    del _depths()[id(module)]
                    init._names.ended(module)
                else:
                    _depths()[id(module)] = depth
            if depth == 0:  # the outermost __init__ of this module has returned: its parameters exist
                init._built(module)

        setattr(cls, "__init__", wrapped)
        self._patched.append((cls, original))

    def _starting(self, module: torch.nn.Module) -> None:
        with self._mode.paused():
            self._units.flush()  # the new module's parameters will be whole: nothing else stays gathered
        self._names.started(module)

    def _built(self, module: torch.nn.Module) -> None:
        with self._mode.paused():
            self._units.flush()
            for child in module.modules():  # its own parameters, and any it registered on built children
                if not self._meta.defer(child):  # meta parameters: partitioned when their values are assigned
                    self._units.partition(child)
            if not _depths():  # the outermost module is built: its names are final
                self._names.root_finished(module, self._units.is_ours)
                self._meta.root_finished(module)


def _depths() -> dict[int, int]:
    if not hasattr(_state, "depths"):
        _state.depths = {}
    return _state.depths


def _subclasses(cls: type) -> list[type]:
    # type[object], not bare type (type[Any]), so that mypy can infer what __subclasses__() returns
    found: list[type[object]] = []
    stack: list[type[object]] = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return found
