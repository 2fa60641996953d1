"""Hooks called by zero-core's accelerator registry."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import hookspec

if TYPE_CHECKING:
    from .abstract import Accelerator


@hookspec
def zero_register_accelerators(register: Callable[[str, type[Accelerator]], None]) -> None:
    """Call `register(name, AcceleratorSubclass)` for each accelerator the plugin provides.

    Import the classes inside the hook, not at module level, so listing plugins stays cheap.
    """
