"""engine.load_checkpoint: read any zero checkpoint into this engine, whatever world size and stage saved it.

A save of the same tag may publish while this reads (another process re-saving it): publishing renames the
old directory away and the new one into place, so a reader's later opens would reach the new files. The
tag directory's identity (device, inode) is taken when the tag is resolved and compared after the read and
on any failure: a changed or vanished directory is a CheckpointError saying to load again, never a raw
error or a mix of two saves.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.state_dict_loader import load
from zero_plugins import ZeroError

from ._deepspeed_resume import deepspeed_as_zero
from ._errors import CheckpointError
from ._describe import Description, check_model
from ._entries import add_model, add_optimizer, keep_loaded_casts
from ._optimizer_type import check_optimizer_type
from ._pieces import EntryBuilder
from ._publish import resolve_tag
from ._training import TrainingEngine, create_optimizer_state, restore_counters, restore_optimizer, restore_rng
from ._trust import CheckpointReader, load_object, save_object
from ._verify import open_verified


def load_checkpoint(engine: TrainingEngine, load_dir: str | Path, tag: str | None = None,
                    load_module_strict: bool = True, load_optimizer_states: bool = True,
                    load_lr_scheduler_states: bool = True,
                    load_module_only: bool = False, trust_checkpoint: bool = False) -> tuple[str, dict[str, Any]]:
    """DeepSpeed's call: returns (the checkpoint's path, the client_state saved with it). Nothing the checkpoint
    holds runs code unless `trust_checkpoint` (_trust.py)."""
    # DeepSpeed's checkpoint: its import (_deepspeed.py)
    load_dir, tag = deepspeed_as_zero(Path(load_dir), tag, trust_checkpoint)
    tag, directory = resolve_tag(Path(load_dir), tag)
    identity = _identity(directory)
    try:
        loaded = _load(engine, directory, load_module_strict, load_optimizer_states, load_lr_scheduler_states,
                       load_module_only, trust_checkpoint)
    except BaseException as error:  # DCP's CheckpointException is a BaseException
        if _identity(directory) != identity:
            raise _replaced(tag, directory) from error
        raise
    if _identity(directory) != identity:
        raise _replaced(tag, directory)
    return loaded


def _load(engine: TrainingEngine, directory: Path, load_module_strict: bool, load_optimizer_states: bool,
          load_lr_scheduler_states: bool, load_module_only: bool, trust_checkpoint: bool) -> tuple[str, dict[str, Any]]:
    reader, metadata = open_verified(directory, trust_checkpoint, across_ranks=True)  # before anything is used
    description = Description.read(directory)
    rank = engine.global_rank
    saved_keys = set(metadata.state_dict_metadata)
    training = _read_object(reader, "training", trust_checkpoint)
    if not isinstance(training, dict) or not isinstance(training.get("client_state"), dict):
        raise ZeroError(f"checkpoint {directory} is damaged: its `training` object is a {type(training).__name__}, "
                        "not zero's training state; load an earlier tag")
    with_state = load_optimizer_states and not load_module_only
    builder = EntryBuilder(rank)
    names = add_model(builder, engine.module, rank, include_frozen=True)
    check_model(description, names.params, directory, load_module_strict)
    if with_state:  # both checks before the first change to the engine
        check_optimizer_type(description.optimizer_type, description.optimizer_state, engine.optimizer.optimizer,
                             directory)
        create_optimizer_state(engine, description.optimizer_state, training["optimizer_steps"])
    add_optimizer(builder, engine.optimizer, engine.policy.shards_optimizer_state, with_state=with_state)
    # The master is always loaded: it is the fp32 copy of the weights, and the next step writes it into them.
    wanted = {key: value for key, value in builder.entries(with_lazy=False).items() if key in saved_keys}
    load(wanted, storage_reader=reader)
    keep_loaded_casts(names, saved_keys)
    for targets, write in builder.lazy_batches(saved_keys):  # state in swap files: a batch of keys at a time
        load(targets, storage_reader=reader)
        write()
    if not load_module_only:
        if load_optimizer_states:
            restore_optimizer(engine, training, scheduler=load_lr_scheduler_states)
        restore_counters(engine, training)
        rng_key = f"rng.rank{rank % description.world_size}"
        if rng_key in saved_keys:  # an imported DeepSpeed checkpoint has none
            restore_rng(_read_object(reader, rng_key, trust_checkpoint))
    return str(directory), dict(training["client_state"])


def _identity(directory: Path) -> tuple[int, int, int] | None:
    """The tag directory's identity: a re-save renames another directory into its place, whose inode number may be
    the deleted one's again (so its change time is part of it)."""
    try:
        stat = os.stat(directory)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns


def _replaced(tag: str, directory: Path) -> CheckpointError:
    return CheckpointError(f"checkpoint tag {tag!r} ({directory}) was replaced by another save while it was being "
                           "loaded; what was read is not one checkpoint. Load again (or load another tag)")


def _read_object(reader: CheckpointReader, key: str, trust_checkpoint: bool) -> Any:
    """One serialized object, alone (DCP's load is collective only for the process group it is given)."""
    objects: dict[str, io.BytesIO] = {key: save_object(None)}
    load(objects, storage_reader=reader, no_dist=True)
    return load_object(objects[key], f"the `{key}` object of checkpoint {reader.path}", trust_checkpoint)



