"""load_config: a ds_config path or dict -> ZeroConfig, or one ConfigError."""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._user_files import ConfigFileError, json_integer, read_config_text

from ._batch import resolve_batch_sizes
from ._checks import check_consistency, drop_offload_unused_by_stage
from ._errors import ConfigError, IgnoredConfigKeysWarning, from_validation_error, show
from ._keys import is_dotted_path, screen, zero_only_paths
from ._model import ZeroConfig


def load_config(source: str | os.PathLike[str] | Mapping[str, Any], *, world_size: int | None = None) -> ZeroConfig:
    """Read a DeepSpeed ds_config (a JSON file's path, or a dict) as DeepSpeed 0.19 would.

    With `world_size`, the batch settings are completed and checked
    (train_batch_size = micro batch * accumulation steps * world size); without it they are left as given.
    DeepSpeed keys that zero does not implement are listed in `.ignored_keys` and in one
    IgnoredConfigKeysWarning. Every problem is a ConfigError whose message is one line.
    """
    if isinstance(source, str) and source.lstrip().startswith("{"):
        raise ConfigError("", "load_config got JSON text; pass a file path, or a dict (json.loads(text))")
    if not isinstance(source, (str, os.PathLike, Mapping)):
        raise ConfigError("", f"load_config takes a ds_config file's path (str or os.PathLike) or a dict, "
                              f"(got {type(source).__name__})")
    raw = source if isinstance(source, Mapping) else read_config_file(_as_path(source))
    ignored: list[str] = []
    data = screen(ZeroConfig, raw, ignored)
    try:
        config = ZeroConfig.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    except RecursionError:
        raise ConfigError("", "the config is nested too deeply (or refers to itself)") from None
    ignored += drop_offload_unused_by_stage(config)
    check_consistency(config)
    if world_size is not None:
        resolve_batch_sizes(config, world_size)
    config._ignored_keys = ignored
    if ignored:
        dotted = [key for key in raw if isinstance(key, str) and is_dotted_path(ZeroConfig, key)]
        nested = [key for key in ignored if key not in dotted]
        listed = f"zero accepts but ignores these DeepSpeed config keys: {', '.join(nested)}" if nested else ""
        why = (f"{'; ' if nested else ''}zero ignores these dotted keys at the top level as DeepSpeed does (it reads "
               f"nested blocks only; nest them in their blocks to set them): {', '.join(dotted)}" if dotted else "")
        warnings.warn(IgnoredConfigKeysWarning(f"{listed}{why} (see docs/config.md)"), stacklevel=2)
    return config


def keys_deepspeed_lacks(data: Mapping[str, Any]) -> list[str]:
    """The dotted paths of the keys in the ds_config `data` that zero reads and DeepSpeed 0.19 does not have
    (`zero_optimization.step_in_backward`, `non_finite_steps`, ...): a DeepSpeed run must go without them."""
    return zero_only_paths(ZeroConfig, data)


def _as_path(source: str | os.PathLike[str]) -> Path:
    try:
        return Path(source)
    except TypeError:  # an os.PathLike whose __fspath__ gives bytes
        raise ConfigError("", f"config file {source!r}: the path must be text (str), not bytes") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """A ds_config file's JSON object, or one ConfigError naming the file and what is wrong with it."""
    if str(path).strip() in ("", "."):
        raise ConfigError("", "config file path is empty; pass the ds_config JSON file's path")
    try:
        # A regular file of at most 16 MiB, in UTF-8 (a FIFO or /dev/zero is refused before it is read).
        text = read_config_text(path, what="config file")
    except ConfigFileError as exc:
        raise ConfigError("", str(exc)) from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=json_integer)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ConfigError("", f"config file {path}: not valid JSON ({exc.msg} at {where})") from None
    except _DuplicateKey as exc:
        raise ConfigError("", f"config file {path}: key {show(exc.key)} appears twice in one object; keep one") from None
    except RecursionError:
        raise ConfigError("", f"config file {path}: JSON nested too deeply to read") from None
    except ValueError as exc:  # what else the JSON parser refuses (an integer too long to parse reads as a float)
        raise ConfigError("", f"config file {path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError("", f"config file {path}: must hold a JSON object (got {type(data).__name__})")
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys silently; DeepSpeed refuses them, and so do we.
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return data
