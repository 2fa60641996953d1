"""`zero checkpoint inspect`: what each tag of a save_dir holds, from the description and DCP's metadata alone.

Sizes come from the metadata; completeness is that the description is there and agrees with the
metadata, that every file the metadata points into exists and is long enough, and that every file
has the size and hash its manifest records (the one read of the tensor data: hashing). Only
directories holding a zero tag's files are inspected: a directory of anything else is "not a
checkpoint directory", one error.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from zero_plugins import ZeroError

from ._describe import Description
from ._deepspeed_read import is_deepspeed_checkpoint
from ._manifest import MANIFEST
from ._publish import DESCRIPTION, LATEST, list_tags, read_latest, resolve_tag, tag_directory
from ._tags import tag_problem
from ._trust import CheckpointReader
from ._verify import file_problems, integrity_problems

DCP_METADATA = ".metadata"


def inspect_checkpoints(save_dir: str | Path, tag: str | None = None,
                        trust_checkpoint: bool = False) -> dict[str, Any]:
    """Every tag of `save_dir` (or only `tag`), summarized: JSON-ready, as `zero checkpoint inspect --json` prints it.
    Nothing is unpickled but DCP's metadata, through the trust model's allowlist unless `trust_checkpoint`."""
    save_dir = Path(save_dir)
    if not save_dir.is_dir():
        raise ZeroError(f"{save_dir} is not a directory")
    latest_file = save_dir / LATEST
    latest = read_latest(latest_file) if latest_file.exists() else None
    _refuse_deepspeed(save_dir, tag or (latest if latest is not None and tag_problem(latest) is None else None))
    if tag is not None:
        tags = [resolve_tag(save_dir, tag)]
    else:
        tags = [(name, save_dir / name) for name in list_tags(save_dir) if _looks_like_a_tag(save_dir / name)]
    if not tags:
        if _looks_like_a_tag(save_dir):
            raise ZeroError(f"{save_dir} is one checkpoint (a tag's directory): pass the directory above it, "
                            f"with --tag {save_dir.name}")
        deepspeed = [name for name in list_tags(save_dir) if is_deepspeed_checkpoint(save_dir / name)]
        if deepspeed:
            _refuse_deepspeed(save_dir, deepspeed[0])
        raise ZeroError(f"{save_dir} is not a checkpoint directory: none of its directories holds {DESCRIPTION}, "
                        f"{DCP_METADATA} or {MANIFEST} (a checkpoint directory, the save_dir given to "
                        "save_checkpoint, holds one directory per tag with those files)")
    return {"directory": str(save_dir), "latest": latest,
            "latest_exists": latest is None or (tag_problem(latest) is None and
                                                tag_directory(save_dir, latest) is not None),
            "tags": [summarize(name, directory, latest == name, trust_checkpoint) for name, directory in tags]}


def _refuse_deepspeed(save_dir: Path, tag: str | None) -> None:
    """DeepSpeed's checkpoints are read by `zero checkpoint import`: listing them as broken zero ones would mislead."""
    for candidate in (save_dir, *((save_dir / tag,) if tag is not None else ())):
        if is_deepspeed_checkpoint(candidate):
            raise ZeroError(f"{candidate} is a DeepSpeed checkpoint, not a zero one: convert it with `zero checkpoint "
                            f"import {save_dir} OUT`, then inspect OUT (engine.load_checkpoint also loads it as it is)")


def _looks_like_a_tag(directory: Path) -> bool:
    """A directory a save made (or one cut short): it holds one of the files every zero tag has."""
    return any(os.path.lexists(directory / name) for name in (DESCRIPTION, DCP_METADATA, MANIFEST))


def summarize(tag: str, directory: Path, latest: bool, trust_checkpoint: bool = False,
              hash_files: bool = True) -> dict[str, Any]:
    """One tag: how it was saved, whether it is complete and its files are those the save wrote (and if not, why),
    and its tensors by category. `hash_files=False`: the manifest was checked already (SavedCheckpoint.open)."""
    summary: dict[str, Any] = {"tag": tag, "directory": str(directory), "latest": latest}
    problems: list[str] = []
    if hash_files:  # first: a changed file is named before it is parsed
        integrity, damage = integrity_problems(directory)
        problems += [f"damaged: {problem}" for problem in damage]
        summary["integrity"] = integrity.value
    description: Description | None = None
    try:
        description = Description.read(directory)
    except ZeroError as error:
        problems.append(str(error))
    metadata = _metadata(directory, problems, trust_checkpoint)
    if description is not None:
        summary.update(world_size=description.world_size, stage=description.stage,
                       compute_dtype=description.compute_dtype, frozen_excluded=description.frozen_excluded,
                       parameters=len(description.params),
                       parameter_elements=sum(math.prod(shape) for shape in description.params.values()))
    if metadata is not None:
        problems += file_problems(directory, metadata)
        summary["categories"] = _categories(metadata)
        summary["objects"] = sum(1 for meta in metadata.state_dict_metadata.values()
                                 if not isinstance(meta, TensorStorageMetadata))
        if description is not None:
            problems += _disagreements(description, metadata)
    summary.update(complete=not problems, problems=problems)
    return summary


def check_complete(directory: Path, trust_checkpoint: bool = False, hash_files: bool = True) -> None:
    """Raise one error naming what is missing, for commands that read a checkpoint's data."""
    problems = summarize(directory.name, directory, False, trust_checkpoint, hash_files)["problems"]
    if problems:
        raise ZeroError(f"checkpoint {directory} is incomplete: {'; '.join(problems)}")


def _metadata(directory: Path, problems: list[str], trust_checkpoint: bool) -> Metadata | None:
    if not (directory / DCP_METADATA).is_file():
        problems.append(f"{DCP_METADATA} (torch.distributed.checkpoint's index of the data) is missing")
        return None
    try:
        return CheckpointReader(directory, trust_checkpoint).read_metadata()
    except ZeroError as error:  # the trust model refused it: a problem that is not "complete"
        problems.append(str(error))
        return None
    except Exception as error:  # a truncated or foreign pickle: report it, as every other problem
        problems.append(f"{DCP_METADATA} cannot be read ({type(error).__name__}: {error})")
        return None


def _categories(metadata: Metadata) -> dict[str, dict[str, int]]:
    """Tensors and bytes per kind of key: model, buffer, master, optim.<state>."""
    categories: dict[str, dict[str, int]] = {}
    for key, meta in sorted(metadata.state_dict_metadata.items()):
        if not isinstance(meta, TensorStorageMetadata):
            continue
        parts = key.split(".")
        category = ".".join(parts[:2]) if parts[0] == "optim" else parts[0]
        entry = categories.setdefault(category, {"tensors": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["bytes"] += math.prod(meta.size) * meta.properties.dtype.itemsize
    return categories


def _disagreements(description: Description, metadata: Metadata) -> list[str]:
    keys = {key for key, meta in metadata.state_dict_metadata.items() if isinstance(meta, TensorStorageMetadata)}
    problems = []
    if len(keys) != description.keys:
        problems.append(f"{DESCRIPTION} counts {description.keys} tensors, {DCP_METADATA} has {len(keys)}")
    absent = [name for name in description.params if f"model.{name}" not in keys]
    if absent:
        problems.append(f"no weights saved for {absent[0]}" + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""))
    return problems
