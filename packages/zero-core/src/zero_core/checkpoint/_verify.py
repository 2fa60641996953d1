"""Whether a checkpoint's data files are all there and whole, checked before anything is read.

DCP's metadata names, for every stored item, its file, offset and length: a file that is
missing or shorter than its last item (a copy cut short, a full disk) is reported as one
error naming the file and both sizes, instead of an unpickling error from deep inside a load.
"""
from __future__ import annotations

from pathlib import Path

from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata
from zero_plugins import ZeroError


def damage(directory: Path, metadata: Metadata) -> str | None:
    """What is wrong with the data files of a checkpoint, or None when every item is within its file."""
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if actual < size:
            return f"{name} is {actual} bytes, but its data runs to byte {size} (the file was cut short)"
    return None


def open_verified(directory: Path) -> tuple[FileSystemReader, Metadata]:
    """A reader for a checkpoint whose files are whole; one error naming the damage otherwise."""
    reader = FileSystemReader(directory)
    try:
        metadata = reader.read_metadata()
    except (OSError, EOFError, RuntimeError, ValueError) as error:
        raise ZeroError(f"checkpoint {directory} is damaged: its .metadata cannot be read ({error})") from None
    problem = damage(directory, metadata)
    if problem is not None:
        raise ZeroError(f"checkpoint {directory} is damaged: {problem}; load an earlier tag, or save again")
    return reader, metadata
