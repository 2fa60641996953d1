"""The offload-device registry, and the one error for a device no installed plugin provides."""
from __future__ import annotations

import os
from importlib import metadata

from zero_plugins import DISABLE_ENV, NamedRegistry, disabled_plugin_names

from zero_plugins.ds_config import ConfigError
from . import _hookspecs
from ._device import OffloadDevice, OffloadSettings

offload_device_registry: NamedRegistry[OffloadDevice] = NamedRegistry(
    kind="offload device", base=OffloadDevice, hookspecs=_hookspecs, hook_name="zero_register_offload_devices",
    env_var="ZERO_OFFLOAD_DEVICE")

_PROVIDER = "zero-offload"
_PROVIDER_PLUGIN = "offload"


def open_offload_device(name: str, settings: OffloadSettings) -> OffloadDevice:
    """The registered device `name`, made for `settings`; a missing or unusable device is one error."""
    found = offload_device_registry.registrations()
    key = f"{settings.block_path}.device"
    if name not in found:
        if not _installed(_PROVIDER):
            why = f"{_PROVIDER} is not installed (pip install {_PROVIDER})"
        elif _PROVIDER_PLUGIN in disabled_plugin_names():
            why = f"{_PROVIDER} is installed but blocked by ZERO_DISABLE_PLUGINS={os.environ.get(DISABLE_ENV, '')}"
        else:
            why = "no installed plugin provides it"
        others = ", ".join(sorted(found)) or "none"
        raise ConfigError(key, f"offload device {name!r} is not available: {why}; devices available: {others}")
    cls = found[name].cls
    usable, reason = offload_device_registry.availability(cls)
    if not usable:
        raise ConfigError(key, f"offload device {name!r} cannot run here: {reason}")
    return cls(settings)


def _installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True
