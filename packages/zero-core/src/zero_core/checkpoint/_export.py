"""`zero checkpoint export`: a checkpoint's weights as a Hugging Face model directory (safetensors shards).

Names and shapes are the module's own (the description's params), so `from_pretrained` loads
them as they are. Tied parameters are saved once, under their first name: HF's models re-tie
the other (`tie_word_embeddings`). The shards are planned from the description's shapes before
any data is read; then tensors are read one at a time and each shard is written as soon as it
is full, so about one shard plus one tensor is in memory at most, whatever the model's size.

An export never destroys what it did not write (_export_dir.py): OUT must be empty, new, or an earlier
export's (its `zero_export.json` lists the files it wrote, and only those are replaced);
`--overwrite` lets it write into another non-empty directory, replacing only the files it writes, and
it still refuses where a weights file it would not replace would be loaded beside its own.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from zero_plugins import ZeroError, read_config_text, write_bytes_no_follow

from ._export_dir import CONFIG_FILE, INDEX_FILE, SINGLE_FILE, ExportDirectory
from ._inspect import check_complete
from ._read import SavedCheckpoint

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Hugging Face's units (transformers.utils.convert_file_size_to_int): GB is 10**9, GiB 2**30.
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}

Progress = Callable[[int, int, str], None]  # (tensors done, tensors in all, the name just read)


def parse_size(text: str) -> int:
    """'2GB', '500MB', '1GiB' or a byte count, as Hugging Face's max_shard_size."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).upper() not in _UNITS:
        raise ZeroError(f"--max-shard-size {text!r}: expected a size such as 2GB, 500MB or 1GiB")
    size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise ZeroError(f"--max-shard-size {text!r}: must be more than 0 bytes")
    return size


def plan_shards(sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
    """Names in order, cut into shards of at most `max_bytes` (a larger tensor gets a shard of its own), as HF does."""
    shards: list[list[str]] = [[]]
    filled = 0
    for name, size in sizes.items():
        if shards[-1] and filled + size > max_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(name)
        filled += size
    return shards


def export_checkpoint(checkpoint_dir: str | Path, out_dir: str | Path, tag: str | None = None, dtype: str = "fp32",
                      max_shard_size: str | int = "2GB", progress: Progress | None = None, overwrite: bool = False,
                      trust_checkpoint: bool = False) -> dict[str, Any]:
    """Write `tag` of `checkpoint_dir` (default: the one `latest` names) to `out_dir` for `from_pretrained`;
    returns what was written. Files of an earlier export in `out_dir` are replaced; another non-empty
    `out_dir` is refused unless `overwrite`."""
    if dtype not in DTYPES:
        raise ZeroError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    target = DTYPES[dtype]
    max_bytes = max_shard_size if isinstance(max_shard_size, int) else parse_size(max_shard_size)
    out = ExportDirectory(Path(out_dir), overwrite)  # checked before anything is read
    checkpoint = SavedCheckpoint.open(checkpoint_dir, tag, trust_checkpoint)
    check_complete(checkpoint.directory, trust_checkpoint, hash_files=False)  # open() checked the manifest
    params = checkpoint.description.params
    if not params:
        raise ZeroError(f"checkpoint {checkpoint.directory} saved no parameters")
    sizes = {name: math.prod(shape) * target.itemsize for name, shape in params.items()}
    shards = plan_shards(sizes, max_bytes)
    files = [SINGLE_FILE] if len(shards) == 1 else [f"model-{k:05d}-of-{len(shards):05d}.safetensors"
                                                    for k in range(1, len(shards) + 1)]
    has_config = (checkpoint.directory / CONFIG_FILE).is_file()
    out.begin([*files, *([INDEX_FILE] if len(shards) > 1 else []), *([CONFIG_FILE] if has_config else [])])
    try:  # into the staging directory: OUT changes only in finish(), whole
        _write_shards(checkpoint, out.staging, files, shards, target, progress)
        if len(shards) > 1:
            weight_map = {name: file for file, names in zip(files, shards) for name in names}
            index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
            write_bytes_no_follow(out.staging / INDEX_FILE, (json.dumps(index, indent=2) + "\n").encode())
        config = _copy_config(checkpoint.directory, out.staging, target)
        out.finish()
    except BaseException:  # Ctrl-C too: OUT stays the earlier export
        out.abandon()
        raise
    return {"checkpoint": str(checkpoint.directory), "tag": checkpoint.tag, "out": str(out.path), "dtype": dtype,
            "files": files, "tensors": len(params), "bytes": sum(sizes.values()), "config": config,
            "kept": out.kept_config}


def _copy_config(directory: Path, out: Path, dtype: torch.dtype) -> bool:
    """The model's config.json (save_checkpoint writes it for HF models), its dtype set to the exported one
    (`from_pretrained(..., dtype="auto")` reads it); False where the checkpoint has none."""
    source = directory / CONFIG_FILE
    if not source.is_file():
        return False
    try:
        config: dict[str, Any] = json.loads(read_config_text(source, what="the checkpoint's model config"))
    except ValueError as error:
        raise ZeroError(f"{source} is not a model config ({error}); save the checkpoint again") from None
    config["dtype"] = str(dtype).removeprefix("torch.")
    if "torch_dtype" in config:  # the key's older name, which older transformers read
        config["torch_dtype"] = config["dtype"]
    write_bytes_no_follow(out / CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode())
    return True


def _write_shards(checkpoint: SavedCheckpoint, directory: Path, files: list[str], shards: list[list[str]],
                  target: torch.dtype, progress: Progress | None) -> None:
    """Each shard's tensors read one at a time and written to `directory` as soon as the shard is full."""
    from safetensors.torch import save_file  # only the export needs it; `zero` itself starts without it

    done, count = 0, sum(len(names) for names in shards)
    for file, names in zip(files, shards):
        shard: dict[str, torch.Tensor] = {}  # rebinding frees the previous shard before this one is read
        for name in names:
            shard[name] = checkpoint.fp32_weight(name).to(target)
            done += 1
            if progress is not None:
                progress(done, count, name)
        save_file(shard, str(directory / file), metadata={"format": "pt"})
