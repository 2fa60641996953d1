"""engine.save_checkpoint: every rank writes its pieces through DCP, rank 0 describes and publishes."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any


import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save

from ._describe import FORMAT, Description
from ._entries import add_model, add_optimizer
from ._pieces import EntryBuilder
from ._publish import prepare, publish, staging_directory
from ._training import TrainingEngine, rng_state, to_bytes, training_state


def save_checkpoint(engine: TrainingEngine, save_dir: str | Path, tag: str | None = None,
                    client_state: dict[str, Any] | None = None, save_latest: bool = True,
                    exclude_frozen_parameters: bool = False) -> Path:
    """Save to `<save_dir>/<tag>` (default tag `global_step<N>`, as DeepSpeed); every rank must call it."""
    save_dir = Path(save_dir)
    tag = str(tag) if tag is not None else f"global_step{engine.global_steps}"
    rank = engine.global_rank
    engine.optimizer.synchronize()
    builder = EntryBuilder(rank)
    names = add_model(builder, engine.module, rank, include_frozen=not exclude_frozen_parameters)
    add_optimizer(builder, engine.optimizer, engine.policy.shards_optimizer_state, with_state=True)
    state: dict[str, Any] = dict(builder.entries())
    state["training"] = to_bytes(training_state(engine, client_state))
    state[f"rng.rank{rank}"] = to_bytes(rng_state())
    if rank == 0:
        prepare(save_dir, tag)
    dist.barrier()
    save(state, storage_writer=FileSystemWriter(staging_directory(save_dir, tag), sync_files=True),
         planner=builder.save_planner())
    dist.barrier()
    final = save_dir / tag
    if rank == 0:
        _write_hf_config(engine.module, staging_directory(save_dir, tag))
        Description(FORMAT, tag, engine.world_size, engine.policy.stage, str(engine.compute_dtype).removeprefix("torch."),
                    names.params, exclude_frozen_parameters, _state_names(builder.keys()),
                    sum(1 for v in state.values() if not isinstance(v, io.BytesIO)), names.buffers,
                    names.tied).write(
            staging_directory(save_dir, tag))
        final = publish(save_dir, tag, save_latest)
    dist.barrier()
    return final


def _write_hf_config(module: torch.nn.Module, directory: Path) -> None:
    """A Hugging Face model's config.json, so that `zero checkpoint export` makes a directory from_pretrained loads."""
    to_json = getattr(getattr(module, "config", None), "to_json_string", None)
    if callable(to_json):
        config = json.loads(to_json())
        config["architectures"] = config.get("architectures") or [type(module).__name__]  # as save_pretrained does
        with open(directory / "config.json", "w", encoding="utf-8") as file:
            json.dump(config, file, indent=2)
            file.flush()
            os.fsync(file.fileno())


def _state_names(keys: list[str]) -> list[str]:
    return sorted({key.split(".")[1] for key in keys if key.startswith("optim.")})



