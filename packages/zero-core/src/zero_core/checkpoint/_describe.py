"""The checkpoint's description (`zero_checkpoint.json`): what was saved, where, and whether it is complete.

Written by rank 0 into the staging directory after every rank's data is durable, so a
directory without it (or with a different model's names and shapes) is never loaded as if
it were this model's checkpoint.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from zero_plugins import ZeroError, read_config_text

from ._errors import CheckpointError
from ._publish import DESCRIPTION, write_durably
from ._tags import tag_problem

FORMAT = 1
COMPUTE_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64"})  # what an engine computes in

log = logging.getLogger("zero_core.checkpoint")


@dataclass
class Description:
    format: int
    tag: str
    world_size: int
    stage: int
    compute_dtype: str
    params: dict[str, list[int]]  # fqn -> shape, of the parameters whose weights were saved
    frozen_excluded: bool
    optimizer_state: list[str]  # the optimizer's param-sized state names saved ("exp_avg", ...)
    keys: int  # tensors in the DCP checkpoint
    buffers: dict[str, list[int]] = field(default_factory=dict)  # fqn -> shape, of the persistent buffers saved
    tied: dict[str, str] = field(default_factory=dict)  # a tied parameter's other name -> the name it is saved under
    optimizer_type: str | None = None  # e.g. "AdamW" (_optimizer_type.py); None: saved before it was recorded

    def write(self, directory: Path) -> None:
        write_durably(directory / DESCRIPTION, json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, directory: Path) -> Description:
        path = directory / DESCRIPTION
        if not path.is_file():
            raise ZeroError(f"{directory} is not a complete zero checkpoint: {DESCRIPTION} is missing (the save did "
                            "not finish, or this is another tool's checkpoint)")
        try:  # bounded, regular files only: a checkpoint's files are read as untrusted input
            data: Any = json.loads(read_config_text(path, what="checkpoint description"))
        except ValueError as error:
            raise CheckpointError(f"{path} is not a zero checkpoint description ({error})") from None
        problem = description_problem(data)
        if problem is not None:
            raise CheckpointError(f"{path} is damaged: {problem}; load an earlier tag, or save again")
        return cls(**data)


def _whole(low: int, high: int | None = None) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and v >= low and (high is None or v <= high)


def _shapes(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, list) and all(_whole(0)(n) for n in v)
                                           for k, v in value.items())


# Each key of zero_checkpoint.json: (whether a save always writes it, its check, what it must be).
_SCHEMA: dict[str, tuple[bool, Callable[[Any], bool], str]] = {
    "format": (True, _whole(1, FORMAT), f"{FORMAT}, the format this zero reads (a newer zero wrote it?)"),
    "tag": (True, lambda v: tag_problem(v) is None, "a valid tag (one directory name)"),
    "world_size": (True, _whole(1), "a whole number >= 1 (the ranks that saved it)"),
    "stage": (True, _whole(0, 3), "a ZeRO stage, 0 to 3"),
    "compute_dtype": (True, lambda v: isinstance(v, str) and v in COMPUTE_DTYPES, f"one of {', '.join(sorted(COMPUTE_DTYPES))}"),
    "params": (True, _shapes, "an object of parameter name -> shape (a list of whole numbers)"),
    "frozen_excluded": (True, lambda v: isinstance(v, bool), "true or false"),
    "optimizer_state": (True, lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
                        "a list of optimizer state names"),
    "keys": (True, _whole(0), "a whole number >= 0 (the tensors saved)"),
    "buffers": (False, _shapes, "an object of buffer name -> shape (a list of whole numbers)"),
    "tied": (False, lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(n, str)
                                                          for k, n in v.items()),
             "an object of tied name -> the parameter name it is saved under"),
    "optimizer_type": (False, lambda v: v is None or (isinstance(v, str) and bool(v)),
                       "the optimizer's class name (a string), or null"),
}


def description_problem(data: Any) -> str | None:
    """What makes `data` (zero_checkpoint.json, parsed) not a description a save writes, naming the key; or None."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    for key, (required, check, expected) in _SCHEMA.items():
        if key not in data:
            if required:
                return f"`{key}` is missing"
        elif not check(data[key]):
            shown = json.dumps(data[key])
            return f"`{key}` is {shown if len(shown) <= 40 else shown[:37] + '...'}, not {expected}"
    unknown = sorted(key for key in data if key not in _SCHEMA)
    return f"`{unknown[0]}` is not a key of a zero checkpoint description" if unknown else None


def check_model(description: Description, current: dict[str, list[int]], where: Path, strict: bool) -> None:
    """One error naming the first parameter whose name or shape differs from the checkpoint's."""
    saved = description.params
    for name, shape in current.items():
        if name in saved and saved[name] != shape:
            raise ZeroError(f"checkpoint {where} is of another model: {name} has shape {tuple(saved[name])} there, "
                            f"{tuple(shape)} here")
    missing = [name for name in current if name not in saved]
    unexpected = [name for name in saved if name not in current]
    if not strict:
        _check_overlap(missing, unexpected, current, description, where)
        return
    if missing and not description.frozen_excluded:
        raise ZeroError(f"checkpoint {where} is of another model: it has no {missing[0]}"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
                        "pass load_module_strict=False to load the parameters it has")
    if unexpected:
        raise ZeroError(f"checkpoint {where} is of another model: this model has no {unexpected[0]}"
                        f"{f' (and {len(unexpected) - 1} more)' if len(unexpected) > 1 else ''}; "
                        "pass load_module_strict=False to load the parameters both have")


def _check_overlap(missing: list[str], unexpected: list[str], current: dict[str, list[int]],
                   description: Description, where: Path) -> None:
    """load_module_strict=False loads the parameters both have: none in common is another model, refused;
    some not in common are said, by name."""
    if current and len(missing) == len(current):
        raise ZeroError(f"checkpoint {where} has none of this model's {len(current)} parameters, so "
                        f"load_module_strict=False would load nothing: this model has {_some(list(current))}, the "
                        f"checkpoint {_some(list(description.params)) if description.params else 'no parameters'}; "
                        "load a checkpoint of this model (or rename its parameters to match)")
    if missing:
        why = " (it was saved with exclude_frozen_parameters=True)" if description.frozen_excluded else ""
        log.warning("checkpoint %s has no %s%s: they keep their current values (load_module_strict=False)", where,
                    _some(missing, limit=20), why)
    if unexpected:
        log.warning("checkpoint %s has %s, which this model lacks: not loaded (load_module_strict=False)", where,
                    _some(unexpected, limit=20))


def _some(names: list[str], limit: int = 3) -> str:
    """The first `limit` names, and how many more."""
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")
