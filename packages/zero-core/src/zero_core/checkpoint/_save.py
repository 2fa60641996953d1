"""engine.save_checkpoint: every rank writes its pieces through DCP, rank 0 describes and publishes.

A save is two halves: `begin_save` (collective: the ranks agree on the tag, what to write, the staging
directory) and `write_save` (the data, the description, the publishing), which an asynchronous save runs
on a thread (_async.py). Every refusal (a bad tag, ranks that disagree, client_state that cannot be
stored, a save_dir that cannot hold the tag) is raised on every rank, before anything is written.
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

from ._describe import FORMAT, Description
from ._entries import ModelNames, add_model, add_optimizer
from ._optimizer_type import optimizer_type
from ._pieces import EntryBuilder
from ._agreement import agree_on_save, rank_zero_outcome
from ._publish import prepare, publish, write_durably
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


def begin_save(engine: TrainingEngine, save_dir: str | Path, tag: object, client_state: Any,
               save_latest: bool, exclude_frozen_parameters: bool) -> PendingSave:
    """The collective first half of every save: agree on the tag, gather what to write, make the staging directory."""
    save_dir = Path(save_dir)
    rank = engine.global_rank
    engine.optimizer.synchronize()
    tag, training = agree_on_save(engine, str(tag) if tag is not None else f"global_step{engine.global_steps}",
                                  client_state)
    builder = EntryBuilder(rank)
    names = add_model(builder, engine.module, rank, include_frozen=not exclude_frozen_parameters)
    add_optimizer(builder, engine.optimizer, engine.policy.shards_optimizer_state, with_state=True)
    state: dict[str, Any] = dict(builder.entries())
    state["training"] = save_object(training)
    state[f"rng.rank{rank}"] = save_object(rng_state())
    staging = Path(rank_zero_outcome(lambda: str(prepare(save_dir, tag)), rank))
    return PendingSave(engine, save_dir, tag, staging, save_latest, exclude_frozen_parameters, builder, names, state)


def write_save(pending: PendingSave, group: dist.ProcessGroup | None = None,
          snapshot: threading.Event | None = None) -> Path:
    """The second half: every rank writes its pieces, then rank 0 describes and publishes. `group`: the
    process group its collectives use (an asynchronous save's own, so they never meet training's)."""
    engine, save_dir, tag, staging = pending.engine, pending.save_dir, pending.tag, pending.staging
    save(pending.state, storage_writer=FileSystemWriter(staging, sync_files=True, thread_count=1),
         planner=pending.builder.save_planner(snapshot), process_group=group)
    dist.barrier(group=group)
    final = save_dir / tag
    if engine.global_rank == 0:
        _write_hf_config(engine.module, staging)
        names = pending.names
        Description(FORMAT, tag, engine.world_size, engine.policy.stage, str(engine.compute_dtype).removeprefix("torch."),
                    names.params, pending.exclude_frozen, _state_names(pending.builder.keys()),
                    sum(1 for v in pending.state.values() if not isinstance(v, io.BytesIO)), names.buffers,
                    names.tied, optimizer_type(engine.optimizer.optimizer)).write(staging)
        final = publish(save_dir, tag, staging, pending.save_latest)
    dist.barrier(group=group)
    return final


def _write_hf_config(module: torch.nn.Module, directory: Path) -> None:
    """A Hugging Face model's config.json, so that `zero checkpoint export` makes a directory from_pretrained loads."""
    to_json = getattr(getattr(module, "config", None), "to_json_string", None)
    if callable(to_json):
        config = json.loads(to_json())
        config["architectures"] = config.get("architectures") or [type(module).__name__]  # as save_pretrained does
        write_durably(directory / "config.json", json.dumps(config, indent=2))


def _state_names(keys: list[str]) -> list[str]:
    return sorted({key.split(".")[1] for key in keys if key.startswith("optim.")})
