"""The `deepspeed` distribution that importlib.metadata reports inside a process where deepspeed is zero_core.

transformers (`transformers.integrations.deepspeed.is_deepspeed_available`) and accelerate
(`accelerate.utils.imports.is_deepspeed_available`) take their DeepSpeed paths only when
`importlib.util.find_spec("deepspeed")` finds a module and `importlib.metadata.metadata("deepspeed")` finds a
distribution; accelerate then compares `version("deepspeed")` with minimums up to 0.16.4
(`compare_versions("deepspeed", ">=", ...)`). So the version is the DeepSpeed release whose surface zero follows,
with a PEP 440 local label that says it is zero: `0.19.8+zero.0.1.0` compares as 0.19.8 and reads as zero.
"""
from __future__ import annotations

import re
from os import PathLike
from importlib.metadata import Distribution
from pathlib import Path

from ..__about__ import __version__ as ZERO_VERSION

DEEPSPEED_VERSION = "0.19.8"  # the release whose calls zero_core answers (docs/engine.md, "DeepSpeed's calls")
ALIAS_VERSION = f"{DEEPSPEED_VERSION}+zero.{ZERO_VERSION}"
NAME = "deepspeed"

_METADATA = (
    "Metadata-Version: 2.1\n"
    f"Name: {NAME}\n"
    f"Version: {ALIAS_VERSION}\n"
    f"Summary: zero_core {ZERO_VERSION} under DeepSpeed's name (zero launch); this is not DeepSpeed\n"
)


class ZeroAsDeepSpeed(Distribution):
    """A distribution made of metadata alone: no files are listed, so nothing installs or removes any."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return _METADATA
        if filename == "top_level.txt":  # importlib.metadata.packages_distributions(): deepspeed -> this
            return f"{NAME}\n"
        return None

    def locate_file(self, path: str | PathLike[str]) -> Path:
        return Path(__file__).resolve().parents[1] / path


def is_deepspeed_name(name: str) -> bool:
    """The distribution name `deepspeed` in any spelling PEP 503 treats as the same (`DeepSpeed`, `DEEPSPEED`)."""
    return re.sub(r"[-_.]+", "-", name).lower() == NAME
