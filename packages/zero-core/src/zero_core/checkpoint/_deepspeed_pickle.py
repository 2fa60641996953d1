"""Reading DeepSpeed's checkpoint files without DeepSpeed: torch.load with stand-ins for its classes.

DeepSpeed's `*_model_states.pt` and `*_optim_states.pt` are torch.save pickles that name
some of DeepSpeed's own classes: the loss scaler object (`deepspeed.runtime.fp16.loss_scaler.
LossScaler`), enums (`ZeroStageEnum`), the universal checkpoint's `fragment_address`. They are
unpickled here as `DeepSpeedObject`s, whatever is installed: DeepSpeed is never imported (a
slow import with side effects, and it may not be there). A stand-in keeps what the pickle
held: the constructor's arguments (an enum's value) and the instance's attributes.

These files are pickles, so loading one runs what it says, as DeepSpeed's own load does
(`weights_only=False`): load only checkpoints you trust. Classes of other packages (the
client state's) are imported as usual and must be importable.
"""
from __future__ import annotations

import pickle
import types
from pathlib import Path
from typing import Any

import torch
from zero_plugins import ZeroError

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


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in _STUBBED:
            return _stub(module, name)
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError) as error:
            raise ZeroError(f"this DeepSpeed checkpoint holds an object of {module}.{name}, which cannot be "
                            f"imported here ({error}); install the package that defines it") from None


_PICKLE_MODULE = types.ModuleType("zero_core_deepspeed_pickle")
_PICKLE_MODULE.Unpickler = _Unpickler  # type: ignore[attr-defined]
_PICKLE_MODULE.load = pickle.load  # type: ignore[attr-defined]
_PICKLE_MODULE.loads = pickle.loads  # type: ignore[attr-defined]


def load_file(path: Path, mmap: bool = True) -> Any:
    """A DeepSpeed checkpoint file's contents, on the CPU; with `mmap` its tensors are read only when touched."""
    try:
        return torch.load(path, map_location="cpu", pickle_module=_PICKLE_MODULE, weights_only=False, mmap=mmap)
    except ZeroError:
        raise
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError) as error:
        if mmap:  # files of torch's old (non-zip) format cannot be memory-mapped
            try:
                return torch.load(path, map_location="cpu", pickle_module=_PICKLE_MODULE, weights_only=False)
            except (OSError, RuntimeError, pickle.UnpicklingError, EOFError):
                pass
        raise ZeroError(f"cannot read DeepSpeed checkpoint file {path}: {error}") from None


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
