"""Describe loaded, blocked and failed plugins, for `zero plugins`."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ._distribution import provenance
from ._manager import disabled_plugin_names, get_plugin_manager, plugin_load_failures


@dataclass(frozen=True)
class PluginInfo:
    name: str
    hooks: list[str]
    distribution: str
    version: str
    enabled: bool
    problem: str = ""  # why an entry point was not loaded (its import raised, its name is taken); "" otherwise

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def plugin_infos() -> list[PluginInfo]:
    manager = get_plugin_manager()
    infos = []
    for name, plugin in manager.list_name_plugin():
        if plugin is None:  # blocked by ZERO_DISABLE_PLUGINS
            continue
        hooks = sorted(caller.name for caller in manager.get_hookcallers(plugin) or [])
        origin = provenance(manager, name)
        infos.append(PluginInfo(name, hooks, origin.distribution, origin.version, True))
    for name in disabled_plugin_names():
        infos.append(PluginInfo(name, [], "", "", False))
    for failure in plugin_load_failures():
        infos.append(PluginInfo(failure.plugin, [], failure.distribution, failure.version, False, failure.problem))
    return sorted(infos, key=lambda info: info.name)
