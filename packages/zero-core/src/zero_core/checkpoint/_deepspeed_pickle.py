"""Reading DeepSpeed's checkpoint files without DeepSpeed, and without running what they name.

DeepSpeed's `*_model_states.pt` and `*_optim_states.pt` are torch.save pickles that name
some of DeepSpeed's own classes: the loss scaler object (`deepspeed.runtime.fp16.loss_scaler.
LossScaler`), enums (`ZeroStageEnum`), the universal checkpoint's `fragment_address`. They are
read with torch's restricted unpickler (`weights_only=True`), those classes mapped to inert
`DeepSpeedObject`s, whatever is installed: DeepSpeed is never imported (a slow import with side
effects, and it may not be there), and nothing a file names is run. A stand-in keeps what the
pickle held: the constructor's arguments (an enum's value) and the instance's attributes.

A file naming anything else (an object of the user's class in client_state) is refused, naming it;
`trust_checkpoint=True` reads it as DeepSpeed's own load does (`weights_only=False`), which runs it.
"""
from __future__ import annotations

import argparse
import pickle
import types
from pathlib import Path
from typing import Any

import torch
from zero_plugins import ZeroError

from ._trust import global_named, refused

_STUBBED = ("deepspeed",)


class DeepSpeedObject:
    """An instance of a DeepSpeed class, unpickled without DeepSpeed: its arguments and attributes only."""

    _qualified_name = "deepspeed.?"

    def __new__(cls, *args: Any, **kwargs: Any) -> DeepSpeedObject:
        instance = super().__new__(cls)
        instance.__dict__["_stub_args"] = args
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, __slots__ values)
            for part in state:
                if isinstance(part, dict):
                    self.__dict__.update(part)
        elif isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_stub_state"] = state

    def __repr__(self) -> str:
        attributes = {k: v for k, v in self.__dict__.items() if not k.startswith("_stub")}
        return f"<{self._qualified_name} {attributes or self.__dict__.get('_stub_args')}>"


_STUB_CLASSES: dict[tuple[str, str], type[DeepSpeedObject]] = {}


def _stub(module: str, name: str) -> type[DeepSpeedObject]:
    key = (module, name)
    if key not in _STUB_CLASSES:
        _STUB_CLASSES[key] = type(name, (DeepSpeedObject,), {"_qualified_name": f"{module}.{name}",
                                                             "__module__": __name__})
    return _STUB_CLASSES[key]


# Harmless beyond DeepSpeed's own: DeepSpeed saves the script's `args` (an argparse.Namespace) when it was given them.
_ALSO_ALLOWED = {"argparse.Namespace": argparse.Namespace}


class _TrustedUnpickler(pickle.Unpickler):
    """(trust_checkpoint=True) any class, DeepSpeed's as stand-ins."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in _STUBBED:
            return _stub(module, name)
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError) as error:
            raise ZeroError(f"this DeepSpeed checkpoint holds an object of {module}.{name}, which cannot be "
                            f"imported here ({error}); install the package that defines it") from None


_TRUSTED_PICKLE = types.ModuleType("zero_core_deepspeed_pickle")
_TRUSTED_PICKLE.Unpickler = _TrustedUnpickler  # type: ignore[attr-defined]
_TRUSTED_PICKLE.load = pickle.load  # type: ignore[attr-defined]
_TRUSTED_PICKLE.loads = pickle.loads  # type: ignore[attr-defined]


def load_file(path: Path, mmap: bool = True, trust_checkpoint: bool = False) -> Any:
    """A DeepSpeed checkpoint file's contents, on the CPU; with `mmap` its tensors are read only when touched."""
    try:
        if trust_checkpoint:
            return _load(path, mmap, pickle_module=_TRUSTED_PICKLE, weights_only=False)
        with torch.serialization.safe_globals(_allowed_globals(path)):
            return _load(path, mmap, weights_only=True)
    except ZeroError:
        raise
    except pickle.UnpicklingError as error:
        raise refused(f"DeepSpeed checkpoint file {path}", global_named(str(error))) from None
    except (OSError, RuntimeError, EOFError) as error:
        raise ZeroError(f"cannot read DeepSpeed checkpoint file {path}: {error}") from None


def _load(path: Path, mmap: bool, **how: Any) -> Any:
    try:
        return torch.load(path, map_location="cpu", mmap=mmap, **how)
    except (OSError, RuntimeError, EOFError):
        if not mmap:
            raise
        return torch.load(path, map_location="cpu", **how)  # files of torch's old (non-zip) format cannot be mapped


def _allowed_globals(path: Path) -> list[Any]:
    """DeepSpeed's classes that `path` names, each as its stand-in, and the few harmless others it may hold."""
    try:
        named = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (OSError, RuntimeError, ValueError):
        named = []  # a file of torch's old format cannot be listed: only torch's own allowlist applies then
    allowed: list[Any] = []
    for full_name in named:
        module, _, name = full_name.rpartition(".")
        if module.split(".")[0] in _STUBBED:
            allowed.append((_stub(module, name), full_name))
        elif full_name in _ALSO_ALLOWED:
            allowed.append((_ALSO_ALLOWED[full_name], full_name))
    return allowed


def enum_value(value: Any) -> Any:
    """The value of an enum member pickled by DeepSpeed (`ZeroStageEnum.gradients` -> 2); other values as they are."""
    if isinstance(value, DeepSpeedObject):
        args = value.__dict__.get("_stub_args") or ()
        return args[0] if args else value.__dict__.get("_value_")
    return getattr(value, "value", value)


def attributes(value: Any) -> dict[str, Any]:
    """A pickled object's attributes (a DeepSpeed stand-in's, a dict's items, or an importable object's vars)."""
    if isinstance(value, dict):
        return dict(value)
    return {k: v for k, v in getattr(value, "__dict__", {}).items() if not k.startswith("_stub")}
