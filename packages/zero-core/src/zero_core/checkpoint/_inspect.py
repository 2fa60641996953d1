"""`zero checkpoint inspect`: what each tag of a save_dir holds, from the description and DCP's metadata alone.

No tensor data is read: sizes come from the metadata, and completeness is that the
description is there and that every file the metadata points into exists and is long enough.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from zero_plugins import ZeroError

from ._describe import DESCRIPTION, Description
from ._publish import LATEST, list_tags, resolve_tag, tag_directory

DCP_METADATA = ".metadata"


def inspect_checkpoints(save_dir: str | Path, tag: str | None = None) -> dict[str, Any]:
    """Every tag of `save_dir` (or only `tag`), summarized: JSON-ready, as `zero checkpoint inspect --json` prints it."""
    save_dir = Path(save_dir)
    if not save_dir.is_dir():
        raise ZeroError(f"{save_dir} is not a directory")
    latest_file = save_dir / LATEST
    latest = latest_file.read_text(encoding="utf-8").strip() if latest_file.is_file() else None
    if tag is not None:
        tags = [resolve_tag(save_dir, tag)]
    else:
        tags = [(name, save_dir / name) for name in list_tags(save_dir)]
    if not tags:
        if (save_dir / DESCRIPTION).exists() or (save_dir / DCP_METADATA).exists():
            raise ZeroError(f"{save_dir} is one checkpoint (a tag's directory): pass the directory above it, "
                            f"with --tag {save_dir.name}")
        raise ZeroError(f"no checkpoints in {save_dir}: it has no tag directories")
    return {"directory": str(save_dir), "latest": latest,
            "latest_exists": latest is None or tag_directory(save_dir, latest) is not None,
            "tags": [summarize(name, directory, latest == name) for name, directory in tags]}


def summarize(tag: str, directory: Path, latest: bool) -> dict[str, Any]:
    """One tag: how it was saved, whether it is complete (and if not, why), and its tensors by category."""
    summary: dict[str, Any] = {"tag": tag, "directory": str(directory), "latest": latest}
    problems: list[str] = []
    description: Description | None = None
    try:
        description = Description.read(directory)
    except ZeroError as error:
        problems.append(str(error))
    metadata = _metadata(directory, problems)
    if description is not None:
        summary.update(world_size=description.world_size, stage=description.stage,
                       compute_dtype=description.compute_dtype, frozen_excluded=description.frozen_excluded,
                       parameters=len(description.params),
                       parameter_elements=sum(math.prod(shape) for shape in description.params.values()))
    if metadata is not None:
        problems += missing_files(directory, metadata)
        summary["categories"] = _categories(metadata)
        summary["objects"] = sum(1 for meta in metadata.state_dict_metadata.values()
                                 if not isinstance(meta, TensorStorageMetadata))
        if description is not None:
            problems += _disagreements(description, metadata)
    summary.update(complete=not problems, problems=problems)
    return summary


def missing_files(directory: Path, metadata: Metadata) -> list[str]:
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
            problems.append(f"{name} is truncated: {path.stat().st_size} bytes, its data runs to {size}")
    return problems


def check_complete(directory: Path) -> None:
    """Raise one error naming what is missing, for commands that read a checkpoint's data."""
    problems = summarize(directory.name, directory, latest=False)["problems"]
    if problems:
        raise ZeroError(f"checkpoint {directory} is incomplete: {'; '.join(problems)}")


def _metadata(directory: Path, problems: list[str]) -> Metadata | None:
    if not (directory / DCP_METADATA).is_file():
        problems.append(f"{DCP_METADATA} (torch.distributed.checkpoint's index of the data) is missing")
        return None
    try:
        return FileSystemReader(directory).read_metadata()
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
