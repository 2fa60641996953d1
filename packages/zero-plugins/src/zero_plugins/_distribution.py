"""Which distribution provides a plugin, for listings and error messages."""
from __future__ import annotations

from dataclasses import dataclass

import pluggy

DIRECT = "registered directly"


@dataclass(frozen=True)
class Provenance:
    plugin: str
    distribution: str
    version: str

    def label(self) -> str:
        if self.distribution == DIRECT:
            return f"plugin {self.plugin!r} ({DIRECT})"
        return f"plugin {self.plugin!r} from {self.distribution} {self.version}"

    def remedy(self) -> str:
        """How a user gets rid of a broken plugin, for the end of an error message."""
        if self.distribution == DIRECT:
            return f"fix it, or unregister it (get_plugin_manager().unregister(name={self.plugin!r}))"
        return (f"update or uninstall {self.distribution}, or block the plugin with "
                f"ZERO_DISABLE_PLUGINS={self.plugin}")


class ZeroPluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering the distribution of each plugin it loaded from an entry point.

    zero loads its entry points itself (_loading.py), one by one, so pluggy's own record of them
    (list_plugin_distinfo) stays empty; `origins` holds it instead: name -> (plugin, provenance).
    """

    def __init__(self, project_name: str) -> None:
        super().__init__(project_name)
        self.origins: dict[str, tuple[object, Provenance]] = {}


def provenance(manager: pluggy.PluginManager, plugin_name: str) -> Provenance:
    if isinstance(manager, ZeroPluginManager):
        plugin, origin = manager.origins.get(plugin_name, (None, None))
        # A test may unregister an entry point's plugin and register another object under its name.
        if origin is not None and plugin is manager.get_plugin(plugin_name):
            return origin
    return Provenance(plugin_name, DIRECT, "")
