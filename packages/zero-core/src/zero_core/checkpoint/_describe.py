"""The checkpoint's description (`zero_checkpoint.json`): what was saved, where, and whether it is complete.

Written by rank 0 into the staging directory after every rank's data is durable, so a
directory without it (or with a different model's names and shapes) is never loaded as if
it were this model's checkpoint.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zero_plugins import ZeroError, read_config_text

from ._publish import DESCRIPTION, write_durably
FORMAT = 1


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
    if not strict:
        return
    missing = [name for name in current if name not in saved]
    unexpected = [name for name in saved if name not in current]
    if missing and not description.frozen_excluded:
        raise ZeroError(f"checkpoint {where} is of another model: it has no {missing[0]}"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
                        "pass load_module_strict=False to load the parameters it has")
    if unexpected:
        raise ZeroError(f"checkpoint {where} is of another model: this model has no {unexpected[0]}"
                        f"{f' (and {len(unexpected) - 1} more)' if len(unexpected) > 1 else ''}; "
                        "pass load_module_strict=False to load the parameters both have")
