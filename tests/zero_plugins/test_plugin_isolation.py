"""Plugins are isolated: an entry point that cannot load, or that takes a name already taken, is skipped and
said once, the others load; a hook that raises is re-raised naming its plugin, the original chained."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from zero_plugins import (
    LoadFailure,
    NamedRegistry,
    PluginError,
    PluginHookError,
    PluginLoadWarning,
    get_plugin_manager,
    hookimpl,
    hookspec,
    plugin_infos,
    plugin_load_failures,
    reset_plugin_manager,
)

from plugin_dists import write_distribution

BROKEN = "import json\nraise RuntimeError('no driver for this device')\n"
WORKING = "from zero_plugins import hookimpl\n"


def test_a_plugin_whose_import_raises_is_skipped_and_said_once(plugin_folder: Path) -> None:
    write_distribution(plugin_folder, "zero-broken", "1.0", {"broken": "isolation_broken"}, {"isolation_broken": BROKEN})
    write_distribution(plugin_folder, "zero-working", "2.0", {"working": "isolation_working"}, {"isolation_working": WORKING})
    problem = (f"importing it raised RuntimeError('no driver for this device') at {plugin_folder / 'isolation_broken.py'}:2; "
               "its hooks are skipped; update or uninstall zero-broken, or block the plugin with "
               "ZERO_DISABLE_PLUGINS=broken")
    with pytest.warns(PluginLoadWarning) as said:
        manager = get_plugin_manager()
    assert [str(warning.message) for warning in said] == [
        f"plugin 'broken' from zero-broken 1.0 (entry point broken = isolation_broken) was not loaded: {problem}"]
    assert plugin_load_failures() == [LoadFailure("broken", "isolation_broken", "zero-broken", "1.0", problem)]
    assert manager.get_plugin("broken") is None
    assert manager.get_plugin("working") is sys.modules["isolation_working"]
    infos = {info.name: info for info in plugin_infos()}
    assert (infos["broken"].enabled, infos["broken"].distribution, infos["broken"].problem) == (
        False, "zero-broken", problem)
    assert (infos["working"].enabled, infos["working"].distribution, infos["working"].version) == (
        True, "zero-working", "2.0")
    get_plugin_manager()  # loaded once: no second warning
    assert len(plugin_load_failures()) == 1


def test_a_blocked_plugin_is_not_imported_so_it_cannot_fail(plugin_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_distribution(plugin_folder, "zero-broken", "1.0", {"broken": "isolation_broken"}, {"isolation_broken": BROKEN})
    monkeypatch.setenv("ZERO_DISABLE_PLUGINS", "broken")
    reset_plugin_manager()
    get_plugin_manager()
    assert plugin_load_failures() == []
    assert "isolation_broken" not in sys.modules


def test_a_name_taken_by_another_distribution_is_refused_naming_both(tmp_path: Path, plugin_folder: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Two folders on sys.path, so which distribution comes first is the path's order, not a directory listing's.
    later = tmp_path / "later"
    write_distribution(plugin_folder / "first", "zero-first", "1.0", {"shared": "isolation_first"},
                       {"isolation_first": WORKING})
    write_distribution(later, "zero-second", "3.1", {"shared": "isolation_second"}, {"isolation_second": WORKING})
    monkeypatch.syspath_prepend(str(later))
    monkeypatch.syspath_prepend(str(plugin_folder / "first"))
    reset_plugin_manager()
    with pytest.warns(PluginLoadWarning):
        manager = get_plugin_manager()
    assert manager.get_plugin("shared") is sys.modules["isolation_first"]
    assert "isolation_second" not in sys.modules
    assert plugin_load_failures() == [LoadFailure(
        "shared", "isolation_second", "zero-second", "3.1",
        "the name 'shared' is taken by plugin 'shared' from zero-first 1.0; its name must change in "
        "zero-second's [project.entry-points.zero] table (or uninstall zero-second)")]


def test_the_same_distribution_found_twice_on_the_path_loads_once(tmp_path: Path, plugin_folder: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_distribution(plugin_folder, "zero-working", "2.0", {"working": "isolation_working"}, {"isolation_working": WORKING})
    copy = tmp_path / "copy"
    write_distribution(copy, "zero-working", "2.0", {"working": "isolation_working"}, {"isolation_working": WORKING})
    monkeypatch.syspath_prepend(str(copy))
    reset_plugin_manager()
    manager = get_plugin_manager()
    assert plugin_load_failures() == []
    assert manager.get_plugin("working") is sys.modules["isolation_working"]


class Gadget:
    pass


specs = types.ModuleType("isolation_gadget_specs")


@hookspec
def zero_register_gadgets(register):  # type: ignore[no-untyped-def]
    """Test hook."""


specs.zero_register_gadgets = zero_register_gadgets  # type: ignore[attr-defined]


def gadgets() -> NamedRegistry[Gadget]:
    return NamedRegistry(kind="gadget", hook_name="zero_register_gadgets", hookspecs=specs, base=Gadget,
                         env_var="ZERO_TEST_GADGET")


class Faulty:
    @hookimpl
    def zero_register_gadgets(self, register):  # type: ignore[no-untyped-def]
        return {}["missing"]


def test_a_hook_that_raises_is_re_raised_naming_the_plugin(plugin_folder: Path) -> None:
    get_plugin_manager().register(Faulty(), name="faulty")
    with pytest.raises(PluginHookError) as caught:
        gadgets().names()
    line = Faulty.zero_register_gadgets.__code__.co_firstlineno + 2
    assert str(caught.value) == (
        f"plugin 'faulty' (registered directly) raised KeyError('missing') in its zero_register_gadgets hook at "
        f"{__file__}:{line}; fix it, or unregister it (get_plugin_manager().unregister(name='faulty'))")
    assert isinstance(caught.value.__cause__, KeyError)
    assert isinstance(caught.value, PluginError)  # the `zero` command prints it as one line


def test_a_hook_of_an_installed_plugin_that_raises_names_its_distribution(plugin_folder: Path) -> None:
    source = ("from zero_plugins import hookimpl\n\n@hookimpl\ndef zero_register_gadgets(register):\n"
              "    raise OSError('cannot open /dev/gadget0')\n")
    write_distribution(plugin_folder, "zero-gadget", "0.3", {"gadget": "isolation_gadget"}, {"isolation_gadget": source})
    with pytest.raises(PluginHookError) as caught:
        gadgets().names()
    assert str(caught.value) == (
        f"plugin 'gadget' from zero-gadget 0.3 raised OSError('cannot open /dev/gadget0') in its "
        f"zero_register_gadgets hook at {plugin_folder / 'isolation_gadget.py'}:5; update or uninstall zero-gadget, or "
        "block the plugin with ZERO_DISABLE_PLUGINS=gadget")


def test_an_unknown_name_says_which_plugins_were_not_loaded(plugin_folder: Path) -> None:
    write_distribution(plugin_folder, "zero-broken", "1.0", {"broken": "isolation_broken"}, {"isolation_broken": BROKEN})
    with pytest.warns(PluginLoadWarning):
        get_plugin_manager()
    with pytest.raises(PluginError) as caught:
        gadgets().get("broken")
    assert str(caught.value) == (
        "unknown gadget 'broken' (from ZERO_TEST_GADGET); available: none; not loaded: "
        f"{plugin_load_failures()[0].message()}")
