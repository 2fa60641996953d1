"""engine.save_checkpoint: every rank writes its pieces through DCP, rank 0 describes and publishes.

A save is two halves: `begin_save` (collective: the ranks agree on the tag, what to write, the staging
directory) and `write_save` (the data, the description, the publishing), which an asynchronous save runs
on a thread (_async.py). Every refusal (a bad tag, ranks that disagree, client_state that cannot be
stored, a save_dir that cannot hold the tag or that another save is writing into) is raised on every rank,
before anything is written. A save that fails later raises a CheckpointError (a full disk, a size limit, a
rank's write) on every rank, or a CollectiveFailed naming the rank it lost; either way nothing is published,
and its staging directory is removed.
"""
from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save
from torch.distributed._shard.sharded_tensor.api import ShardedTensor
from zero_plugins import ZeroError

from ..comm import guarded
from ._describe import FORMAT, Description
from ._entries import ModelNames, add_model, add_optimizer
from ._optimizer_type import optimizer_type
from ._pieces import EntryBuilder
from ._agreement import agree_on_save, rank_zero_outcome
from ._errors import save_failed
from ._publish import prepare, publish, write_durably
from ._staging import Staging
from ._training import TrainingEngine, rng_state
from ._trust import save_object


@dataclass
class PendingSave:
    """A save whose tensors are gathered (views of the engine's buffers) and whose staging directory exists."""

    engine: TrainingEngine
    save_dir: Path
    tag: str
    staging: Path
    save_latest: bool
    exclude_frozen: bool
    builder: EntryBuilder
    names: ModelNames
    state: dict[str, Any]
    owned: Staging | None  # rank 0's: the staging directory and the save_dir's lock, until the save ends


def begin_save(engine: TrainingEngine, save_dir: str | Path, tag: object, client_state: Any,
               save_latest: bool, exclude_frozen_parameters: bool) -> PendingSave:
    """The collective first half of every save: agree on the tag, gather what to write, make the staging directory."""
    save_dir = Path(save_dir)
    rank = engine.global_rank
    engine.progress.post(f"save_checkpoint after step {engine.global_steps}")
    engine.optimizer.synchronize()
    tag, training = agree_on_save(engine, str(tag) if tag is not None else f"global_step{engine.global_steps}",
                                  client_state)
    builder = EntryBuilder(rank)
    names = add_model(builder, engine.module, rank, include_frozen=not exclude_frozen_parameters)
    add_optimizer(builder, engine.optimizer, engine.policy.shards_optimizer_state, with_state=True)
    state: dict[str, Any] = dict(builder.entries())
    state["training"] = save_object(training)
    state[f"rng.rank{rank}"] = save_object(rng_state())
    owned: list[Staging] = []

    def make_staging() -> str:
        owned.append(prepare(save_dir, tag))
        return str(owned[0].path)

    try:
        staging = Path(rank_zero_outcome(make_staging, rank, engine.progress))
    except BaseException:
        for made in owned:  # the broadcast failed after rank 0 made it
            made.close()
        raise
    return PendingSave(engine, save_dir, tag, staging, save_latest, exclude_frozen_parameters, builder, names, state,
                       owned[0] if owned else None)


def write_save(pending: PendingSave, group: dist.ProcessGroup | None = None,
               snapshot: threading.Event | None = None) -> Path:
    """The second half: every rank writes its pieces, then rank 0 describes and publishes. `group`: the
    process group its collectives use (an asynchronous save's own, so they never meet training's)."""
    engine, tag, staging = pending.engine, pending.tag, pending.staging
    try:
        with guarded(f"save_checkpoint {tag!r} (writing)", engine.progress):
            save(pending.state, storage_writer=FileSystemWriter(staging, sync_files=True, thread_count=1),
                 planner=pending.builder.save_planner(snapshot), process_group=group)
        # DCP's save returns once every rank's data is durable; rank 0's outcome is every rank's
        return Path(rank_zero_outcome(lambda: str(_describe_and_publish(pending)), engine.global_rank,
                                      engine.progress, group))
    except ZeroError:  # CheckpointError and CollectiveFailed say what happened already
        raise
    except Exception as error:
        raise save_failed(tag, staging, error, _tensor_bytes(pending.state)) from error
    except BaseException as error:  # DCP's CheckpointException is a BaseException; interrupts pass as they are
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise save_failed(tag, staging, error, _tensor_bytes(pending.state)) from error
    finally:
        if pending.owned is not None:
            pending.owned.close()


def _describe_and_publish(pending: PendingSave) -> Path:
    """(Rank 0) the description and the model's config into the staging directory, then the publishing."""
    engine, staging = pending.engine, pending.staging
    try:
        _write_hf_config(engine.module, staging)
        names = pending.names
        Description(FORMAT, pending.tag, engine.world_size, engine.policy.stage,
                    str(engine.compute_dtype).removeprefix("torch."), names.params, pending.exclude_frozen,
                    _state_names(pending.builder.keys()),
                    sum(1 for v in pending.state.values() if not isinstance(v, io.BytesIO)), names.buffers,
                    names.tied, optimizer_type(engine.optimizer.optimizer)).write(staging)
        return publish(pending.save_dir, pending.tag, staging, pending.save_latest)
    except OSError as error:
        raise save_failed(pending.tag, staging, error, _tensor_bytes(pending.state)) from error


def _tensor_bytes(state: dict[str, Any]) -> int:
    """About what this rank writes: its tensors' and serialized objects' bytes."""
    total = 0
    for value in state.values():
        if isinstance(value, ShardedTensor):
            total += sum(shard.tensor.numel() * shard.tensor.element_size() for shard in value.local_shards())
        elif isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, io.BytesIO):
            total += value.getbuffer().nbytes
    return total


def _write_hf_config(module: torch.nn.Module, directory: Path) -> None:
    """A Hugging Face model's config.json, so that `zero checkpoint export` makes a directory from_pretrained loads."""
    to_json = getattr(getattr(module, "config", None), "to_json_string", None)
    if callable(to_json):
        config = json.loads(to_json())
        config["architectures"] = config.get("architectures") or [type(module).__name__]  # as save_pretrained does
        write_durably(directory / "config.json", json.dumps(config, indent=2))


def _state_names(keys: list[str]) -> list[str]:
    return sorted({key.split(".")[1] for key in keys if key.startswith("optim.")})
