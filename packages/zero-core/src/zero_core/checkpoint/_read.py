"""Reading a saved checkpoint without an engine or a process group: its tag, description and tensors.

DCP reassembles one key from every rank's chunks into one plain tensor, and `no_dist` reads
it without a collective, so reading a key costs the memory of that tensor alone, whatever
world size and stage wrote it. Everything here reads one key at a time.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load
from zero_plugins import ZeroError

from ._describe import Description
from ._publish import resolve_tag
from ._verify import open_verified


class SavedCheckpoint:
    """One tag of a save_dir, opened for reading: its description and its tensors' metadata (no data yet)."""

    def __init__(self, directory: Path, tag: str, description: Description, trust_checkpoint: bool = False) -> None:
        self.directory = directory
        self.tag = tag
        self.description = description
        self._reader, metadata = open_verified(directory, trust_checkpoint)
        saved = metadata.state_dict_metadata
        self.tensors = {key: meta for key, meta in saved.items() if isinstance(meta, TensorStorageMetadata)}

    @classmethod
    def open(cls, checkpoint_dir: str | Path, tag: str | None = None, trust_checkpoint: bool = False) -> SavedCheckpoint:
        """`tag` of `checkpoint_dir` (the save_dir given to save_checkpoint), or the one `latest` names; its
        metadata is read through the trust model's allowlist unless `trust_checkpoint` (_trust.py)."""
        tag, directory = resolve_tag(Path(checkpoint_dir), tag)
        return cls(directory, tag, Description.read(directory), trust_checkpoint)

    def read(self, key: str) -> torch.Tensor:
        """The whole tensor saved under `key`, as saved: 1-D, in its saved dtype."""
        meta = self.tensors.get(key)
        if meta is None:
            raise ZeroError(f"checkpoint {self.directory} has no tensor {key!r}: it is incomplete or was written by "
                            "another version of zero")
        values = torch.empty(meta.size, dtype=meta.properties.dtype)
        with warnings.catch_warnings():  # DCP warns at every no_dist load that it loads in one process: we mean to
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            load({key: values}, storage_reader=self._reader, no_dist=True)
        return values

    def has_master(self, name: str) -> bool:
        """Whether parameter `name` has an fp32 master copy (trainable ones do; frozen ones do not)."""
        return f"master.{name}" in self.tensors

    def fp32_weight(self, name: str) -> torch.Tensor:
        """Parameter `name` in fp32 and its own shape: its master copy where saved, else its weights cast."""
        shape = self.description.params[name]
        values = self.read(f"master.{name}" if self.has_master(name) else f"model.{name}")
        if values.numel() != math.prod(shape):
            raise ZeroError(f"checkpoint {self.directory}: {name} has {values.numel()} elements, its description says "
                            f"shape {tuple(shape)}")
        return values.float().reshape(shape)

    def buffer(self, name: str) -> torch.Tensor:
        """Persistent buffer `name` in its saved dtype and its own shape."""
        return self.read(f"buffer.{name}").reshape(self.description.buffers[name])


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir: str | Path, tag: str | None = None,
                                             exclude_frozen_parameters: bool = False,
                                             trust_checkpoint: bool = False) -> dict[str, torch.Tensor]:
    """DeepSpeed's call: {name: fp32 tensor in the parameter's shape, on CPU} from a zero checkpoint.

    `checkpoint_dir` is the save_dir given to save_checkpoint; `tag` defaults to the one `latest`
    names. Trainable parameters come from their fp32 master copy, frozen ones from their weights
    cast to fp32 (`exclude_frozen_parameters` leaves them out). A tied parameter appears under each
    of its names, one tensor shared, as DeepSpeed's does; buffers are not included. Nothing the checkpoint
    holds runs code unless `trust_checkpoint` (zero's own argument; docs/checkpoints.md).
    """
    checkpoint = SavedCheckpoint.open(checkpoint_dir, tag, trust_checkpoint)
    weights = {name: checkpoint.fp32_weight(name) for name in checkpoint.description.params
               if not exclude_frozen_parameters or checkpoint.has_master(name)}
    weights.update({alias: weights[name] for alias, name in checkpoint.description.tied.items() if name in weights})
    return weights
