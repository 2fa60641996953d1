"""The base of every config block: DeepSpeed's key names, closed to unknown keys."""
from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """A ds_config block. Subclasses list the DeepSpeed keys they accept but ignore, and those DeepSpeed rejects."""

    model_config = ConfigDict(extra="forbid")

    # DeepSpeed keys of this block that zero accepts and ignores, with one warning.
    IGNORED: ClassVar[frozenset[str]] = frozenset()
    # DeepSpeed keys that DeepSpeed 0.19 itself rejects as removed features: key -> what happened to it.
    REMOVED: ClassVar[Mapping[str, str]] = {}
    # Fields the Hugging Face Trainer fills in where a ds_config says "auto" (transformers' HfTrainerDeepSpeedConfig);
    # zero reads "auto" there as DeepSpeed's default. "auto" anywhere else is an error naming the key.
    TRAINER_FILLS: ClassVar[frozenset[str]] = frozenset()
    # Keys zero reads that DeepSpeed does not have (zero's own opt-ins).
    ZERO_ONLY: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def key_names(cls) -> dict[str, str]:
        """Every spelling this block accepts (field names and aliases) -> the field it sets."""
        names: dict[str, str] = {}
        for field_name, info in cls.model_fields.items():
            names[field_name] = field_name
            if isinstance(info.validation_alias, AliasChoices):
                for choice in info.validation_alias.choices:
                    names[str(choice)] = field_name
        return names
