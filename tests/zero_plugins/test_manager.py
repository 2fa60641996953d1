"""The process-wide manager: entry points, ZERO_DISABLE_PLUGINS, listing."""
from __future__ import annotations

import re
from importlib import metadata

import pytest

from zero_plugins import (
    disabled_plugin_names,
    get_plugin_manager,
    hookimpl,
    lazy_exports,
    plugin_infos,
    reset_plugin_manager,
)


def installed_zero_entry_points() -> set[str]:
    return {ep.name for ep in metadata.entry_points(group="zero")}


def test_manager_loads_every_installed_entry_point(plugin_manager):
    loaded = {name for name, plugin in plugin_manager.list_name_plugin() if plugin is not None}
    assert installed_zero_entry_points() <= loaded


def test_manager_is_shared_until_reset(plugin_manager):
    assert get_plugin_manager() is plugin_manager
    reset_plugin_manager()
    assert get_plugin_manager() is not plugin_manager


def test_disabled_plugins_are_not_loaded_and_listed_as_disabled(monkeypatch, plugin_manager):
    installed = sorted(installed_zero_entry_points())
    if not installed:
        pytest.skip("no zero plugin distribution is installed in this environment")
    victim = installed[0]
    monkeypatch.setenv("ZERO_DISABLE_PLUGINS", f" {victim} , ,other")
    assert disabled_plugin_names() == [victim, "other"]
    reset_plugin_manager()
    manager = get_plugin_manager()
    assert manager.is_blocked(victim)
    assert manager.get_plugin(victim) is None
    infos = {info.name: info for info in plugin_infos()}
    assert infos[victim].enabled is False
    assert infos["other"].enabled is False


def test_listing_names_hooks_and_distribution(plugin_manager):
    class Direct:
        @hookimpl
        def zero_register_commands(self, cli):  # type: ignore[no-untyped-def]
            pass

    plugin_manager.register(Direct(), name="direct")
    infos = {info.name: info for info in plugin_infos()}
    assert infos["direct"].hooks == ["zero_register_commands"]
    assert infos["direct"].distribution == "registered directly"
    for name in installed_zero_entry_points():
        dist = infos[name].distribution
        assert dist.startswith("zero-"), (name, dist)
        assert infos[name].version == metadata.version(dist)


@pytest.mark.parametrize(("block", "problem"), [
    ("if TYPE_CHECKING:\n    from json import dumps\n", "write `dumps as dumps`"),
    ("if TYPE_CHECKING:\n    import json\n", "holds only `from module import name as name` lines"),
    ("X = 1\n", "no `if TYPE_CHECKING:` imports"),
])
def test_a_lazy_package_declares_its_exports_as_type_checking_imports(tmp_path, block, problem):
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\n" + block)
    with pytest.raises(TypeError, match=re.escape(problem)):
        lazy_exports("somewhere", str(init))


def test_lazy_exports_import_each_name_on_first_use(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text("if TYPE_CHECKING:\n    from json import dumps as dumps\n    from . import decoder as decoder\n")
    getattr_, dir_, names = lazy_exports("json", str(init))
    assert names == ["dumps", "decoder"] and {"dumps", "decoder"} <= set(dir_())
    import json
    import json.decoder

    assert getattr_("dumps") is json.dumps and getattr_("decoder") is json.decoder
