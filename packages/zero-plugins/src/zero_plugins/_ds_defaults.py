"""DeepSpeed's defaults for the ds_config blocks that decide memory, stated once and readable without pydantic.

They are data (ds_defaults.json, shaped as a ds_config that spells out every default): the ds_config schema
(zero_plugins.ds_config, pydantic) gives its fields these values, and zero_estimate's ZeroSettings takes them
too, since an estimate from counts must not import pydantic.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_DEFAULTS: Mapping[str, Any] = json.loads((Path(__file__).parent / "ds_defaults.json").read_text(encoding="utf-8"))


def ds_defaults(block: str) -> Mapping[str, Any]:
    """The defaults of the block at the dotted path `block`, e.g. "zero_optimization.offload_param"."""
    table: Any = _DEFAULTS
    for name in block.split("."):
        if not isinstance(table, Mapping) or name not in table:
            raise KeyError(f"ds_defaults.json has no block {block!r}")
        table = table[name]
    return dict(table)


def ds_default(key: str) -> Any:
    """DeepSpeed's default of the ds_config key at the dotted path `key`, e.g. "aio.block_size"."""
    block, name = key.rsplit(".", 1)
    defaults = ds_defaults(block)
    if name not in defaults:
        raise KeyError(f"ds_defaults.json has no key {key!r}")
    return defaults[name]


def overlap_comm_default(stage: int) -> bool:
    """`zero_optimization.overlap_comm` left out: DeepSpeed overlaps for stage 3 only."""
    return stage == 3
