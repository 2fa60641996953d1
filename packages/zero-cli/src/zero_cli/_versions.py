"""Installed zero-* distributions, for `zero --version`."""
from __future__ import annotations

from importlib import metadata


def installed_zero_distributions() -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("zero-"):
            seen[name] = dist.version
    return sorted(seen.items())


def version_text() -> str:
    return "\n".join(f"{name} {version}" for name, version in installed_zero_distributions())
