"""Hooks called by zero-core's offload-device registry."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import hookspec

if TYPE_CHECKING:
    from ._device import OffloadDevice


@hookspec
def zero_register_offload_devices(register: Callable[[str, type[OffloadDevice]], None]) -> None:
    """Call `register(name, OffloadDevice subclass)` for each offload device the plugin provides.

    The name is what a ds_config's `offload_optimizer.device` / `offload_param.device` says
    ("cpu", "nvme"). Import the classes inside the hook, not at module level.
    """
