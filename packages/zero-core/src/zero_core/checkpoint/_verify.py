"""Whether a checkpoint's data files are all there and whole, checked before anything is read.

DCP's metadata names, for every stored item, its file, offset and length: a file that is
missing or shorter than its last item (a copy cut short, a full disk) is reported as one
error naming the file and both sizes, instead of an unpickling error from deep inside a load.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from torch.distributed.checkpoint.metadata import Metadata
from zero_plugins import ZeroError

from ._trust import CheckpointReader


def file_problems(directory: Path, metadata: Metadata) -> list[str]:
    """A line for each data file the metadata points into that is missing or shorter than what it holds."""
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    problems = []
    for name, size in sorted(needed.items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size < size:
            problems.append(f"{name} is truncated: {path.stat().st_size} bytes, its data runs to byte {size} (the file "
                            "was cut short)")
    return problems


def open_verified(directory: Path, trust_checkpoint: bool = False) -> tuple[CheckpointReader, Metadata]:
    """A reader for a checkpoint whose files are whole; one error naming the damage otherwise."""
    reader = CheckpointReader(directory, trust_checkpoint)
    try:
        metadata = reader.read_metadata()
    except ZeroError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as error:
        raise ZeroError(f"checkpoint {directory} is damaged: its .metadata cannot be read ({error})") from None
    problems = file_problems(directory, metadata)
    if problems:
        raise ZeroError(f"checkpoint {directory} is damaged: {problems[0]}; load an earlier tag, or save again")
    return reader, metadata
