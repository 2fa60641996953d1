"""`deepspeed.utils.zero_to_fp32`'s three calls, with DeepSpeed's arguments, on zero's checkpoints.

What each returns or writes is DeepSpeed's: the fp32 weights (trainable ones from their master copy, frozen
ones cast), the persistent buffers in their saved dtype, and a tied parameter under each of its names. Files
are read one tensor at a time and nothing in them runs code (docs/checkpoints.md, "What is safe to open");
`trust_checkpoint=True`, a keyword DeepSpeed does not have, lifts that for a checkpoint you trust.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TypeVar

import torch
from zero_plugins import replace_file, staged_file

from ..checkpoint import SavedCheckpoint, parse_size, plan_shards

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir: str | os.PathLike[str], tag: str | None = None,
                                             exclude_frozen_parameters: bool = False, lazy_mode: bool = False, *,
                                             trust_checkpoint: bool = False) -> dict[str, torch.Tensor]:
    """{name: tensor on CPU} of `tag` of `checkpoint_dir` (the save_dir; default tag: the one `latest` names):
    buffers, then parameters in fp32 (frozen ones left out with `exclude_frozen_parameters`), tied ones shared.

    `lazy_mode` is accepted for DeepSpeed's callers and returns the same tensors (its lazy tensors' `.contiguous()`
    works on them too); `convert_zero_checkpoint_to_fp32_state_dict` is the call that holds one shard at a time.
    """
    checkpoint = SavedCheckpoint.open(Path(checkpoint_dir), tag, trust_checkpoint)
    state = {name: checkpoint.buffer(name) for name in checkpoint.description.buffers}
    for name in _parameter_names(checkpoint, exclude_frozen_parameters):
        state[name] = checkpoint.fp32_weight(name)
    state.update({alias: state[name] for alias, name in checkpoint.description.tied.items() if name in state})
    return state


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir: str | os.PathLike[str],
                                               output_dir: str | os.PathLike[str], max_shard_size: str | int | None = "5GB",
                                               safe_serialization: bool = False, tag: str | None = None,
                                               exclude_frozen_parameters: bool = False, *,
                                               trust_checkpoint: bool = False) -> None:
    """Write the checkpoint's fp32 state dict to `output_dir` as DeepSpeed does: `pytorch_model.bin` (torch.save) or,
    with `safe_serialization`, `model.safetensors`; above `max_shard_size` (Hugging Face's units, None: one file)
    `<name>-00001-of-0000N.<ext>` shards and a `<file>.index.json` weight map. Floating-point tensors are fp32.

    Shards are planned from the saved shapes and written as they fill, so about one shard is in memory at a time.
    A tied parameter is stored once per shard file it shares; safetensors, which cannot hold two names of one
    tensor, keeps it under its first name only (as `save_pretrained`, and `from_pretrained` re-ties it).
    """
    checkpoint = SavedCheckpoint.open(Path(checkpoint_dir), tag, trust_checkpoint)
    description = checkpoint.description
    names = _parameter_names(checkpoint, exclude_frozen_parameters)
    sizes = {name: 4 * math.prod(shape) for name, shape in description.params.items() if name in names}
    buffer_sizes = {name: math.prod(shape) * checkpoint.tensors[f"buffer.{name}"].properties.dtype.itemsize
                    for name, shape in description.buffers.items()}
    all_sizes = {**buffer_sizes, **sizes}  # buffers first, as DeepSpeed orders them
    if max_shard_size is None:
        shards = [list(all_sizes)]
    else:
        shards = plan_shards(all_sizes, max_shard_size if isinstance(max_shard_size, int) else parse_size(max_shard_size))
    stem, extension = ("model", "safetensors") if safe_serialization else ("pytorch_model", "bin")
    files = [f"{stem}.{extension}"] if len(shards) == 1 else [
        f"{stem}-{k:05d}-of-{len(shards):05d}.{extension}" for k in range(1, len(shards) + 1)]
    aliases: dict[str, list[str]] = {}
    if not safe_serialization:
        for alias, name in description.tied.items():
            aliases.setdefault(name, []).append(alias)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for file, keys in zip(files, shards):
        shard: dict[str, torch.Tensor] = {}  # rebinding frees the previous shard before this one is read
        for name in keys:
            value = checkpoint.buffer(name) if name in buffer_sizes else checkpoint.fp32_weight(name)
            shard[name] = value.float() if value.is_floating_point() else value
            for alias in aliases.get(name, []):
                shard[alias] = shard[name]
        weight_map.update(dict.fromkeys(shard, file))
        _write(shard, out / file, safe_serialization)
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(all_sizes.values())}, "weight_map": weight_map}
        replace_file(out / f"{stem}.{extension}.index.json",
                     (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())


def load_state_dict_from_zero_checkpoint(model: ModuleT, checkpoint_dir: str | os.PathLike[str],
                                         tag: str | None = None, *, trust_checkpoint: bool = False) -> ModuleT:
    """Move `model` to CPU, load the checkpoint's fp32 weights and buffers into it (non-strict, as DeepSpeed) and
    return it. Give it a plain model, not one a running engine wraps: the engine's views would be replaced."""
    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag, trust_checkpoint=trust_checkpoint)
    model = model.cpu()
    model.load_state_dict(state, strict=False)
    return model


def _parameter_names(checkpoint: SavedCheckpoint, exclude_frozen_parameters: bool) -> list[str]:
    return [name for name in checkpoint.description.params
            if not exclude_frozen_parameters or checkpoint.has_master(name)]


def _write(shard: dict[str, torch.Tensor], path: Path, safe_serialization: bool) -> None:
    """Replace `path` with the shard, whole; a link there (a snapshot's file) is replaced, never written through."""
    with staged_file(path) as fresh:
        if safe_serialization:
            from safetensors.torch import save_file  # only this format needs it

            save_file({name: value.contiguous() for name, value in shard.items()}, str(fresh), metadata={"format": "pt"})
        else:
            torch.save(shard, fresh)
