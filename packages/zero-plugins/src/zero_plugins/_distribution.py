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


def provenance(manager: pluggy.PluginManager, plugin_name: str) -> Provenance:
    plugin = manager.get_plugin(plugin_name)
    for candidate, dist in manager.list_plugin_distinfo():
        if candidate is plugin:
            return Provenance(plugin_name, dist.project_name, dist.version)
    return Provenance(plugin_name, DIRECT, "")
