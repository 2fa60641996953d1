"""Importing a DeepSpeed checkpoint: DeepSpeed's per-rank ZeRO files rewritten as a zero checkpoint.

`import_deepspeed_checkpoint(ds_dir, out_dir, tag)` reads one tag of a DeepSpeed 0.19.8
checkpoint (stages 1-3, fp32, bf16 or fp16; any world size) and writes `<out_dir>/<tag>`, a
zero checkpoint with the canonical keys (`model.<fqn>`, `master.<fqn>`,
`optim.<state>.<fqn>`, `buffer.<fqn>`, the `training` object and the description), which
`engine.load_checkpoint` reads at any world size and stage. It needs no DeepSpeed: the files
are unpickled with stand-ins for DeepSpeed's classes (_deepspeed_pickle.py).

One process writes, through torch.distributed.checkpoint without a process group. The
tensors are assembled one at a time while DCP writes them (a planner that resolves each
key when its turn comes, one file per tensor), from memory-mapped DeepSpeed files: the
import holds about one parameter's worth of memory, whatever the model's size.

DeepSpeed saves no RNG state, so neither does the import: a resumed run keeps its
generators, as DeepSpeed's own resume does. Its micro-step count is the steps times the
gradient accumulation steps, where DeepSpeed's resume starts it from 0 (the same accumulation
boundaries either way).
"""
from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.planner import WriteItem
from torch.distributed.checkpoint.state_dict_saver import save
from zero_plugins import ZeroError

from ._describe import FORMAT, Description
from ._deepspeed_read import DeepSpeedCheckpoint, Param, is_deepspeed_checkpoint
from ._publish import LATEST, check_save_dir, latest_tag, prepare, publish
from ._storable import check_engine_state
from ._tags import check_tag
from ._trust import save_object

log = logging.getLogger("zero_core.checkpoint")

# What DeepSpeed writes at the top of its model states file besides the client state.
DEEPSPEED_KEYS = frozenset({
    "module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
    "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "skipped_steps", "global_steps",
    "global_samples", "dp_world_size", "mp_world_size", "checkpoint_parallel_dimensions", "ds_config", "ds_version",
    "universal_checkpoint_info", "num_experts", "autoep_layers", "ds_autoep_layers",
})

Loader = Callable[[], torch.Tensor]


def resolve_deepspeed_tag(source: Path, tag: str | None) -> tuple[Path, str]:
    """(the tag directory, the tag) of a DeepSpeed checkpoint: `source` is its save directory (with
    `latest`, or given `tag`) or the tag directory itself (imported as `tag`, or under its own name)."""
    if is_deepspeed_checkpoint(source) and (tag is None or not (source / tag).is_dir()):
        return source, check_tag(tag or source.resolve().name, "the imported tag (--tag, or the directory's name)")
    if tag is None:
        pointer = source / LATEST
        if not pointer.is_file():
            raise ZeroError(f"{source} is not a DeepSpeed checkpoint: it has neither a `{LATEST}` file nor "
                            "mp_rank_00_model_states.pt; pass the tag directory, or --tag")
        tag = latest_tag(pointer)
    else:
        check_tag(tag, "--tag")
    directory = source / tag
    if not is_deepspeed_checkpoint(directory):
        raise ZeroError(f"{directory} is not a DeepSpeed checkpoint tag directory (no mp_rank_00_model_states.pt "
                        "or zero_pp_rank_0_mp_rank_00_model_states.pt, or it is a zero checkpoint already)")
    return directory, tag


def import_deepspeed_checkpoint(source: str | Path, out_dir: str | Path, tag: str | None = None,
                                save_latest: bool = True, trust_checkpoint: bool = False) -> Path:
    """Convert one tag of a DeepSpeed checkpoint to `<out_dir>/<tag>` (published atomically, as a save is).
    Its files are read without running what they name unless `trust_checkpoint` (_deepspeed_pickle.py)."""
    directory, tag = resolve_deepspeed_tag(Path(source), tag)
    out = Path(out_dir)
    check_save_dir(out, tag)  # before the DeepSpeed files are read
    checkpoint = DeepSpeedCheckpoint(directory, trust_checkpoint)
    staging = prepare(out, tag)
    try:
        write_checkpoint(checkpoint, staging.path, tag)
        return publish(out, tag, staging.path, save_latest)
    finally:
        staging.close()  # removes what a failed import wrote, and the save_dir's lock


def write_checkpoint(checkpoint: DeepSpeedCheckpoint, directory: Path, tag: str) -> Description:
    loaders: dict[str, tuple[list[int], torch.dtype, Loader]] = {}
    shapes: dict[str, list[int]] = {}

    def add(key: str, numel: int, dtype: torch.dtype, loader: Loader) -> None:
        loaders[key] = ([numel], dtype, loader)

    state_names = checkpoint.state_names()
    for param in checkpoint.params:
        shapes[param.name] = param.shape
        add(f"model.{param.name}", param.numel, checkpoint.compute_dtype, partial(_model, checkpoint, param))
        add(f"master.{param.name}", param.numel, torch.float32, partial(_master, checkpoint, param))
        for name in state_names:
            if name not in checkpoint.flats[param.flat].states:  # no state there yet: loading makes zeros
                continue
            add(f"optim.{name}.{param.name}", param.numel, torch.float32, partial(_state, checkpoint, name, param))
    for name, (shape, _) in checkpoint.frozen.items():
        shapes[name] = shape
        numel = int(torch.Size(shape).numel())
        add(f"model.{name}", numel, checkpoint.compute_dtype, partial(_frozen, checkpoint, name))
    buffers: dict[str, list[int]] = {}
    for name in checkpoint.buffer_names:
        buffer = checkpoint.module.get(name)
        if isinstance(buffer, torch.Tensor):
            buffers[name] = list(buffer.shape)
            add(f"buffer.{name}", buffer.numel(), buffer.dtype, partial(torch.reshape, buffer, (-1,)))
    state: dict[str, Any] = {key: torch.empty((), dtype=dtype).expand(shape) for key, (shape, dtype, _) in
                             loaders.items()}
    training = training_state(checkpoint)
    check_engine_state(training)  # what a zero checkpoint holds must load without running code
    state["training"] = save_object(training)
    with warnings.catch_warnings():  # "torch.distributed is disabled ...": one process writes, by design
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        save(state, storage_writer=FileSystemWriter(directory, single_file_per_rank=False, sync_files=True),
             planner=_AssemblingPlanner({key: loader for key, (_, _, loader) in loaders.items()}), no_dist=True)
    description = Description(FORMAT, tag, checkpoint.world_size, checkpoint.stage,
                              str(checkpoint.compute_dtype).removeprefix("torch."), shapes, False, state_names,
                              len(loaders), buffers=buffers, tied=dict(checkpoint.shared))
    description.write(directory)
    return description


def training_state(checkpoint: DeepSpeedCheckpoint) -> dict[str, Any]:
    """The `training` object of the zero checkpoint, from DeepSpeed's model states and optimizer files."""
    saved = checkpoint.model_states
    config = saved.get("ds_config") or {}
    accumulation = config.get("gradient_accumulation_steps")
    batch = config.get("train_batch_size")
    steps = int(saved.get("global_steps", 0))
    for unsupported in ("data_sampler", "random_ltd"):
        if saved.get(unsupported) is not None:
            log.warning("the DeepSpeed checkpoint's %s state is not imported (zero has no %s)", unsupported,
                        unsupported.replace("_", " "))
    return {
        "counters": {
            "global_steps": steps,
            "global_samples": int(saved.get("global_samples", steps * batch if isinstance(batch, int) else 0)),
            "micro_steps": steps * accumulation if isinstance(accumulation, int) else 0,
            "skipped_steps": int(saved.get("skipped_steps", 0)),
        },
        "param_groups": checkpoint.param_groups,
        "optimizer_steps": checkpoint.steps(),
        "loss_scaler": checkpoint.loss_scaler(),
        "lr_scheduler": saved.get("lr_scheduler"),
        "client_state": {key: value for key, value in saved.items() if key not in DEEPSPEED_KEYS},
    }


def _model(checkpoint: DeepSpeedCheckpoint, param: Param) -> torch.Tensor:
    return checkpoint.model(param).to(checkpoint.compute_dtype)


def _master(checkpoint: DeepSpeedCheckpoint, param: Param) -> torch.Tensor:
    return checkpoint.master(param).float()


def _state(checkpoint: DeepSpeedCheckpoint, name: str, param: Param) -> torch.Tensor:
    return checkpoint.state(name, param).float()


def _frozen(checkpoint: DeepSpeedCheckpoint, name: str) -> torch.Tensor:
    return checkpoint.frozen_weights(name).to(checkpoint.compute_dtype)


class _AssemblingPlanner(DefaultSavePlanner):
    """Saves placeholders' keys with the tensors their loaders assemble, one at a time, as DCP writes them."""

    def __init__(self, loaders: dict[str, Loader]) -> None:
        super().__init__()
        self._loaders = loaders

    def resolve_data(self, write_item: WriteItem) -> torch.Tensor | io.BytesIO:
        loader = self._loaders.get(write_item.index.fqn)
        if loader is None:
            return super().resolve_data(write_item)
        tensor = loader()
        expected = write_item.tensor_data.size if write_item.tensor_data is not None else None
        if expected is not None and tensor.numel() != expected.numel():
            raise ZeroError(f"{write_item.index.fqn}: assembled {tensor.numel()} elements from the DeepSpeed "
                            f"checkpoint, its shape says {expected.numel()}")
        return tensor.contiguous()
