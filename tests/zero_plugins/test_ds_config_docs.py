"""docs/config.md tables every key the config models know, with the status the models give it."""
from __future__ import annotations

import re
import typing
from pathlib import Path

from zero_plugins.ds_config import ZeroConfig
from zero_plugins.ds_config._base import ConfigModel

DOCS = Path(__file__).parents[2] / "docs" / "config.md"
ROW = re.compile(r"^\| `([^`]+)` \| (supported|ignored|rejected) \|")


def _documented() -> dict[str, str]:
    rows = [ROW.match(line) for line in DOCS.read_text().splitlines()]
    return {match[1]: match[2] for match in rows if match}


def _known(model: type[ConfigModel], prefix: str = "") -> dict[str, str]:
    status = {prefix + key: "supported" for key in model.key_names()}
    status |= {prefix + key: "ignored" for key in model.IGNORED}
    status |= {prefix + key: "rejected" for key in model.REMOVED}
    for name, info in model.model_fields.items():
        for block in (info.annotation, *typing.get_args(info.annotation)):
            if isinstance(block, type) and issubclass(block, ConfigModel):
                status |= _known(block, f"{prefix}{name}.")
    return status


def test_docs_table_lists_every_key_with_its_status():
    assert _documented() == _known(ZeroConfig)
