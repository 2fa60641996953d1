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
from typing import Any

from zero_plugins import ZeroError, read_config_text

from ._publish import DESCRIPTION, write_durably
FORMAT = 1

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
            data: dict[str, Any] = json.loads(read_config_text(path, what="checkpoint description"))
            return cls(**data)
        except (ValueError, TypeError) as error:
            raise ZeroError(f"{path} is not a zero checkpoint description ({error})") from None


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
