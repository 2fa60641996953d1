"""The trust model: opening a checkpoint never runs code that the checkpoint names (docs/checkpoints.md).

A pickle is a program: a file that names `os.system` in a `__reduce__` runs it when unpickled.
Every pickled thing a checkpoint holds is therefore read through an allowlist:

- DCP's `.metadata` (torch.distributed.checkpoint reads it with a bare `pickle.load`) goes through
  `MetadataUnpickler`, which builds DCP's metadata dataclasses, torch's dtypes, sizes and layouts, and
  paths, and refuses every other global;
- the engine's objects (`training`, `rng.rank<r>`) and `client_state` are torch.save'd and read with
  `torch.load(weights_only=True)`, torch's own restricted unpickler (tensors and plain containers);
  `client_state` is checked at save time, so what a save writes always loads this way;
- DeepSpeed's files go through the same `weights_only` load, with its own classes mapped to inert
  stand-ins (_deepspeed_pickle.py).

`trust_checkpoint=True` (`--trust-checkpoint`) lifts the allowlists, for checkpoints whose source the
user trusts that hold other objects; every refusal says so.
"""
from __future__ import annotations

import io
import pathlib
import pickle
from typing import IO, Any, cast

import torch
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from zero_plugins import ZeroError

from ._errors import CheckpointError

TRUST_HINT = ("if you trust where this checkpoint came from, pass trust_checkpoint=True (`--trust-checkpoint` on the "
              "command line), which runs what its pickles name")

_DCP = "torch.distributed.checkpoint"
# What DCP's metadata pickles name (torch 2.x): its dataclasses and their enum, a storage path, torch's Size and layouts.
_METADATA_GLOBALS = {
    (f"{_DCP}.metadata", name) for name in (
        "Metadata", "StorageMeta", "MetadataIndex", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")
} | {
    (f"{_DCP}.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "PureWindowsPath"), ("pathlib", "Path"),
    ("collections", "OrderedDict"),
}


def refused(what: str, detail: str) -> ZeroError:
    return ZeroError(f"{what} was not opened: it names {detail}, which is not among what a checkpoint may hold, and "
                     f"opening it would run that; {TRUST_HINT}")


class MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata and nothing else: every global outside the allowlist is refused before it is looked up."""

    def __init__(self, file: IO[bytes], what: str) -> None:
        super().__init__(file)
        self._what = what

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(vars(torch).get(name), torch.dtype):
            return vars(torch)[name]  # a tensor's dtype, pickled as torch.<name>
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        raise refused(self._what, f"{module}.{name}")


class CheckpointReader(FileSystemReader):
    """DCP's file reader, whose `.metadata` is read through `MetadataUnpickler` unless the checkpoint is trusted.

    Tensors DCP reads with torch.load(weights_only=True) already; objects (BytesIO entries) reach
    `load_object` in this module, which reads them the same way."""

    def __init__(self, path: str | pathlib.Path, trust_checkpoint: bool = False) -> None:
        super().__init__(path)
        self.trust_checkpoint = trust_checkpoint

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        _check_inside(pathlib.Path(self.path), pathlib.Path(path), f"{path}", "is a link to")
        if self.trust_checkpoint:
            metadata = super().read_metadata(*args, **kwargs)
        else:
            with self.fs.create_stream(path, "rb") as file:
                metadata = MetadataUnpickler(cast(IO[bytes], file), f"{path}").load()
            if not isinstance(metadata, Metadata):
                raise ZeroError(f"{path} is not torch.distributed.checkpoint metadata (it holds a "
                                f"{type(metadata).__name__})")
            storage_meta = metadata.storage_meta or StorageMeta()  # as DCP's own read_metadata completes it
            storage_meta.load_id = self.load_id
            metadata.storage_meta = storage_meta
        # DCP reads each item from `<tag>/<relative_path>`: a path that leads elsewhere would load another file.
        for index, info in (metadata.storage_data or {}).items():
            relative = info.relative_path
            if not isinstance(relative, (str, pathlib.PurePath)):
                raise CheckpointError(f"{path} is damaged: the data of {index.fqn} has no file name (a "
                                      f"{type(relative).__name__}); load an earlier tag, or save again")
            _check_inside(pathlib.Path(self.path), pathlib.Path(self.path) / relative,
                          f"{path} places the data of {index.fqn} at {str(relative)!r}, which",
                          "leads to")
        return metadata


def _check_inside(tag: pathlib.Path, path: pathlib.Path, what: str, verb: str) -> None:
    """One CheckpointError unless `path` (links followed) lies in the tag directory `tag`."""
    root, target = tag.resolve(), path.resolve()
    if not target.is_relative_to(root) or target == root:  # an absolute path, `..`, or a link away
        raise CheckpointError(f"{what} {verb} {target}, outside the checkpoint's directory {root}: it was not "
                              "read; a checkpoint's files lie in its tag directory (load an earlier tag, or save "
                              "again)")


def save_object(value: Any) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return buffer


def load_object(buffer: io.BytesIO, what: str, trust_checkpoint: bool) -> Any:
    """An object a checkpoint holds (`what` names it in errors), read with torch's restricted unpickler."""
    buffer.seek(0)
    if trust_checkpoint:
        return torch.load(buffer, weights_only=False)
    try:
        return torch.load(buffer, weights_only=True)
    except pickle.UnpicklingError as error:
        raise refused(what, global_named(str(error))) from None


def global_named(message: str) -> str:
    """The global torch's weights_only refusal names ('Unsupported global: GLOBAL a.b.C ...'), or its first line."""
    marker = "GLOBAL "
    start = message.find(marker)
    if start < 0:
        return f"something torch's weights_only load refuses ({message.strip().splitlines()[0]})"
    return message[start + len(marker):].split()[0]
