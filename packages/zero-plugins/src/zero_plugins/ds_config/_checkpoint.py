"""`checkpoint` block: DeepSpeed's checkpoint settings, of which zero implements `tag_validation`."""
from __future__ import annotations

from enum import Enum

from pydantic import field_validator

from ._base import ConfigModel


class TagValidation(str, Enum):
    """What a save does when the ranks pass different tags (DeepSpeed's names; matched case-insensitively)."""

    IGNORE = "Ignore"  # every rank saves under rank 0's tag, silently
    WARN = "Warn"  # the same, with a warning naming each rank's tag
    FAIL = "Fail"  # an error on every rank, before anything is written


class CheckpointConfig(ConfigModel):
    """`tag_validation`: DeepSpeed's default is Warn; zero's is Fail, because differing tags (tags built from
    time.time() on each rank) otherwise publish a `latest` that names a checkpoint missing ranks' data."""

    IGNORED = frozenset({"load_universal", "use_node_local_storage", "parallel_write", "writer"})

    tag_validation: TagValidation = TagValidation.FAIL

    @field_validator("tag_validation", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        # DeepSpeed upper-cases the value before comparing it, so "fail", "FAIL" and "Fail" are one setting.
        if isinstance(value, str):
            return next((mode for mode in TagValidation if mode.value.lower() == value.lower()), value)
        return value
