"""Whether a checkpoint's files are all there and whole, checked before anything is read.

First the manifest (_manifest.py): every file's size and blake2b hash as the save wrote them, so a
value changed in place is caught before DCP's metadata is unpickled or a weight is used. Then DCP's
metadata, which names, for every stored item, its file, offset and length: a file that is missing or
shorter than its last item (a copy cut short, a full disk) is reported as one error naming the file
and both sizes, instead of an unpickling error from deep inside a load. A tag without a manifest
(saved before manifests) gets the metadata's checks alone, and is said once to be unverified.
"""
from __future__ import annotations

import logging
import pickle
from pathlib import Path

import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata
from zero_plugins import ZeroError

from ._errors import CheckpointError
from ._manifest import MANIFEST, Integrity, ManifestDamaged, manifest_problems, read_manifest
from ._trust import CheckpointReader

log = logging.getLogger("zero_core.checkpoint")
_SAID_UNVERIFIED: set[Path] = set()


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


def integrity_problems(directory: Path, across_ranks: bool = False) -> tuple[Integrity, list[str]]:
    """What the manifest says of `directory`'s files, and a line per file that differs. `across_ranks`
    (every rank of the default process group calls it): each rank hashes a share of the files, and
    every rank gets every rank's findings."""
    try:
        records = read_manifest(directory)
    except ManifestDamaged as error:
        return Integrity.DAMAGED, [str(error)]
    if records is None:
        return Integrity.UNVERIFIED, []
    names = sorted(records, key=lambda name: (-records[name].size, name))  # largest first: even shares
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if across_ranks and dist.is_initialized() else (0, 1)
    problems = sorted(manifest_problems(directory, records, names[rank::world_size]))  # by file name, as below
    if world_size > 1:
        gathered: list[list[str] | None] = [None] * world_size
        dist.all_gather_object(gathered, problems)
        problems = sorted(line for lines in gathered for line in lines or [])
    return (Integrity.DAMAGED if problems else Integrity.VERIFIED), problems


def open_verified(directory: Path, trust_checkpoint: bool = False,
                  across_ranks: bool = False) -> tuple[CheckpointReader, Metadata]:
    """A reader for a checkpoint whose files are whole; one CheckpointError naming the damage otherwise.
    `across_ranks`: every rank calls it (load_checkpoint), and the hashing is shared (`integrity_problems`)."""
    integrity, problems = integrity_problems(directory, across_ranks)
    if problems:
        raise _damaged(directory, problems[0])
    if integrity is Integrity.UNVERIFIED and directory not in _SAID_UNVERIFIED:
        _SAID_UNVERIFIED.add(directory)
        if not across_ranks or not dist.is_initialized() or dist.get_rank() == 0:
            log.warning("checkpoint %s has no %s (saved by an earlier zero): its files are loaded unverified; save "
                        "it again to add one", directory, MANIFEST)
    reader = CheckpointReader(directory, trust_checkpoint)
    try:
        metadata = reader.read_metadata()
    except ZeroError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"checkpoint {directory} is damaged: its .metadata cannot be read ({error})") from None
    problems = file_problems(directory, metadata)
    if problems:
        raise _damaged(directory, problems[0])
    return reader, metadata


def _damaged(directory: Path, problem: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {directory} is damaged: {problem}; load an earlier tag, or save again")
