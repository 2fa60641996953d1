"""The zero_config a ZeroTrainer is given: a ds_config file's path or a dict, read once as a dict."""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from zero_plugins.ds_config import ConfigError, read_config_file

ConfigSource: TypeAlias = str | os.PathLike[str] | Mapping[str, Any]


def read_zero_config(source: ConfigSource) -> dict[str, Any]:
    """The ds_config as a dict of its own (the caller's dict is never changed); ConfigError for a file it cannot read."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if isinstance(source, (str, os.PathLike)):
        return read_config_file(Path(source))
    raise ConfigError("", f"zero_config takes a ds_config file's path or a dict (got {type(source).__name__})")
