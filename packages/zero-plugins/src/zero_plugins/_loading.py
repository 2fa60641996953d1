"""Loading the `zero` entry points one by one, so that a plugin that cannot load breaks no other.

pluggy's own loader (load_setuptools_entrypoints) stops at the first entry point whose import raises,
so every `zero` command printed that traceback, `zero estimate` too; and it skips without a word an
entry point whose name is taken, so a third party's `core` loaded first shadowed zero-core's own plugin
(and `initialize` then found no accelerator). Here the built-ins load first, each entry point on its
own; one whose import raises, or whose name belongs to another distribution, becomes a LoadFailure,
which the manager warns of once and every listing names.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from ._distribution import Provenance, ZeroPluginManager
from ._errors import raised_at

#: The entry points of zero's own distributions: name -> distribution. No other distribution may take these names.
BUILTIN_PLUGINS: dict[str, str] = {
    "cli": "zero-cli",
    "core": "zero-core",
    "estimate": "zero-estimate",
    "offload": "zero-offload",
    "pin": "zero-pin",
}


@dataclass(frozen=True)
class LoadFailure:
    """An entry point that was not loaded, and why (one line, with the fix)."""

    plugin: str  # the entry point's name, which is the plugin's name
    target: str  # the entry point's value: "module" or "module:attribute"
    distribution: str
    version: str
    problem: str

    def label(self) -> str:
        return (f"plugin {self.plugin!r} from {self.distribution} {self.version} "
                f"(entry point {self.plugin} = {self.target})")

    def message(self) -> str:
        return f"{self.label()} was not loaded: {self.problem}"


def load_entry_points(manager: ZeroPluginManager, group: str) -> list[LoadFailure]:
    """Register every entry point of `group` that is not blocked on `manager`; the ones that failed."""
    entries = [(dist, point) for dist in metadata.distributions() for point in dist.entry_points
               if point.group == group]
    entries.sort(key=lambda entry: BUILTIN_PLUGINS.get(entry[1].name) != _name(entry[0]))  # stable: built-ins first
    owners: dict[str, Provenance] = {}
    failures: list[LoadFailure] = []
    for dist, point in entries:
        origin = Provenance(point.name, _name(dist), dist.version)
        if manager.is_blocked(point.name) or owners.get(point.name) == origin:  # a distribution on sys.path twice
            continue
        problem = _name_problem(origin, owners.get(point.name))
        if problem is None:
            owners[point.name] = origin
            problem = _load(manager, point, origin)
        if problem is not None:
            failures.append(LoadFailure(point.name, point.value, origin.distribution, origin.version, problem))
    return failures


def _name_problem(origin: Provenance, owner: Provenance | None) -> str | None:
    """Why `origin` may not have its name: a built-in's, or one another distribution took first."""
    rename = (f"its name must change in {origin.distribution}'s [project.entry-points.zero] table "
              f"(or uninstall {origin.distribution})")
    builtin = BUILTIN_PLUGINS.get(origin.plugin)
    if builtin is not None and builtin != origin.distribution:
        owned = f"{owner.label()}, a built-in" if owner is not None else f"{builtin}, a built-in (not installed here)"
        return f"the name {origin.plugin!r} belongs to {owned}; {rename}"
    if owner is not None:
        return f"the name {origin.plugin!r} is taken by {owner.label()}; {rename}"
    return None


def _load(manager: ZeroPluginManager, point: metadata.EntryPoint, origin: Provenance) -> str | None:
    """Import and register one entry point; None, or what went wrong."""
    try:
        plugin = point.load()
        manager.register(plugin, name=point.name)
    except Exception as error:  # a third party's import: anything may raise, and must not stop the others
        return f"importing it raised {error!r}{raised_at(error)}; its hooks are skipped; {origin.remedy()}"
    manager.origins[point.name] = (plugin, origin)
    return None


def _name(dist: metadata.Distribution) -> str:
    """The distribution's name as pip writes it (zero_core and Zero.Core are zero-core)."""
    return (dist.metadata["Name"] or "").lower().replace("_", "-").replace(".", "-")
