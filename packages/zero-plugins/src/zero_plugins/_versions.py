"""Installed zero-* distributions, for `zero --version` and `zero report`."""
from __future__ import annotations

from importlib import metadata


def installed_zero_distributions() -> dict[str, str]:
    """{distribution name: version} for every installed distribution named zero-*."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("zero-"):
            found[name] = dist.version
    return dict(sorted(found.items()))
