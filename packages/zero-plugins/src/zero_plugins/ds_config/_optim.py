"""`optimizer` and `scheduler` blocks: a type name and the keyword arguments of its constructor."""
from __future__ import annotations

from pydantic import Field

from ._base import ConfigModel
from ._types import Param


class OptimizerConfig(ConfigModel):
    """The optimizer the engine builds when the client passes none (`Adam`, `AdamW`, `SGD`, ...)."""

    IGNORED = frozenset({"legacy_fusion"})

    type: str = Field(min_length=1)
    params: dict[str, Param] = Field(default_factory=dict)


class SchedulerConfig(ConfigModel):
    """The learning-rate scheduler the engine builds and steps with the optimizer."""

    type: str = Field(min_length=1)
    params: dict[str, Param] = Field(default_factory=dict)
