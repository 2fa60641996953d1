"""The walk over the raw dict before pydantic sees it: unknown, ignored and removed keys, and "auto".

pydantic would report an unknown key as "extra inputs are not permitted"; here it gets a "did you
mean", a pointer to the block it belongs in, or DeepSpeed's reason for removing it.
"""
from __future__ import annotations

import difflib
import functools
import typing
from collections.abc import Mapping
from typing import Any

from ._base import ConfigModel
from ._errors import ConfigError, join_path
from ._types import AUTO


def _block_type(model: type[ConfigModel], field_name: str) -> type[ConfigModel] | None:
    """The config block a field holds (unwrapping `X | None`), or None for a plain value."""
    annotation = model.model_fields[field_name].annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, ConfigModel):
            return candidate
    return None


@functools.cache
def _where_keys_live(root: type[ConfigModel]) -> dict[str, tuple[str, ...]]:
    """Every key zero accepts anywhere under `root` -> the paths of the blocks that accept it."""
    found: dict[str, list[str]] = {}

    def visit(model: type[ConfigModel], path: str) -> None:
        for key, field_name in model.key_names().items():
            found.setdefault(key, []).append(path)
            block = _block_type(model, field_name)
            if block is not None and key == field_name:
                visit(block, join_path(path, key))

    visit(root, "")
    return {key: tuple(paths) for key, paths in found.items()}


def _unknown_key(root: type[ConfigModel], model: type[ConfigModel], key: str, path: str) -> ConfigError:
    here = join_path(path, key)
    elsewhere = [p for p in _where_keys_live(root).get(key, ()) if p != path]
    if elsewhere:
        blocks = " or ".join(f'"{p}"' if p else "the top level" for p in elsewhere)
        return ConfigError(here, f"unknown key here; move it into {blocks}")
    candidates = [*model.key_names(), *model.IGNORED]
    match = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if match:
        return ConfigError(here, f'unknown key; did you mean "{match[0]}"?')
    return ConfigError(here, "unknown key; remove it (docs/config.md lists every key zero reads)")


def is_dotted_path(root: type[ConfigModel], key: str) -> bool:
    """Whether a top-level `key` spells a nested key's path ("zero_optimization.reduce_bucket_size").

    DeepSpeed reads blocks only, so it ignores such a key without a word; TRL's `prepare_deepspeed` writes them.
    """
    *blocks, last = key.split(".")
    model: type[ConfigModel] | None = root
    for name in blocks:
        field_name = model.key_names().get(name) if model is not None else None
        model = _block_type(model, field_name) if model is not None and field_name is not None else None
    return bool(blocks) and model is not None and (last in model.key_names() or last in model.IGNORED)


def screen(root: type[ConfigModel], data: Mapping[str, Any], ignored: list[str]) -> dict[str, Any]:
    """`data` without its ignored keys (appended to `ignored`) and the "auto" values the Hugging Face Trainer
    fills in; raises ConfigError on bad keys and on "auto" anywhere else."""
    return _screen(root, root, data, "", ignored)


def _screen(
    root: type[ConfigModel], model: type[ConfigModel], data: Mapping[str, Any], path: str, ignored: list[str]
) -> dict[str, Any]:
    names = model.key_names()
    spelled: dict[str, str] = {}  # field -> the spelling used, to catch a key given under two aliases
    kept: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(join_path(path, str(key)), "keys must be strings")
        here = join_path(path, key)
        if key in model.IGNORED or (model is root and is_dotted_path(root, key)):
            ignored.append(here)
            continue
        if key in model.REMOVED:
            raise ConfigError(here, f"DeepSpeed 0.19 rejects this key too ({model.REMOVED[key]}); remove it")
        if key not in names:
            raise _unknown_key(root, model, key, path)
        field_name = names[key]
        if field_name in spelled:
            raise ConfigError(here, f'same setting as "{spelled[field_name]}"; keep one of them')
        spelled[field_name] = key
        # "auto" (Hugging Face style) means "DeepSpeed's default" where the Trainer would fill it in; for the batch
        # sizes that default is "computed from the other two". Elsewhere ("stage": "auto", a whole block) nothing
        # fills it, and reading it as the default would silently run stage 0.
        if isinstance(value, str) and value == AUTO:
            if field_name in model.TRAINER_FILLS:
                continue
            raise ConfigError(here, 'must be a concrete value; "auto" is read only where the Hugging Face Trainer '
                                    'fills it in (docs/config.md, "auto")')
        block = _block_type(model, field_name)
        if block is not None and isinstance(value, Mapping):
            value = _screen(root, block, value, here, ignored)
        kept[key] = value
    return kept


def zero_only_paths(model: type[ConfigModel], data: Mapping[str, Any], path: str = "") -> list[str]:
    """The dotted paths of the keys in `data` (a block of type `model`, at `path`) that zero reads and DeepSpeed
    does not have (each block's ZERO_ONLY), in the order they appear."""
    found: list[str] = []
    names = model.key_names()
    for key, value in data.items():
        here = join_path(path, key)
        if key in model.ZERO_ONLY:
            found.append(here)
        elif key in names and isinstance(value, Mapping):
            block = _block_type(model, names[key])
            if block is not None:
                found += zero_only_paths(block, value, here)
    return found
