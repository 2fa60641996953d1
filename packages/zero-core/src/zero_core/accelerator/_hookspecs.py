"""Hooks called by zero-core's accelerator registry."""
from __future__ import annotations

from zero_plugins import hookspec


@hookspec
def zero_register_accelerators(register) -> None:  # type: ignore[no-untyped-def]
    """Call `register(name, AcceleratorSubclass)` for each accelerator the plugin provides.

    Import the classes inside the hook, not at module level, so listing plugins stays cheap.
    """
