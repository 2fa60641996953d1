"""NamedRegistry: registration through a hook, duplicates, unknown names, type checks; selection: the
variable or default, statuses with reasons, shared instances."""
from __future__ import annotations

import sys
import types

import pytest
from zero_plugins import NamedRegistry, PluginError, hookimpl, hookspec


class Widget:
    pass


class RoundWidget(Widget):
    pass


class SquareWidget(Widget):
    pass


specs = types.ModuleType("widget_specs")


@hookspec
def zero_register_widgets(register):  # type: ignore[no-untyped-def]
    """Test hook."""


specs.zero_register_widgets = zero_register_widgets
sys.modules[specs.__name__] = specs


def make_registry() -> NamedRegistry[Widget]:
    return NamedRegistry(
        kind="widget", hook_name="zero_register_widgets", hookspecs=specs, base=Widget, env_var="ZERO_TEST_WIDGET"
    )


class Provides:
    def __init__(self, **widgets: type) -> None:
        self.widgets = widgets

    @hookimpl
    def zero_register_widgets(self, register):  # type: ignore[no-untyped-def]
        for name, cls in self.widgets.items():
            register(name, cls)


def test_registered_classes_are_found_by_name(plugin_manager):
    plugin_manager.register(Provides(round=RoundWidget, square=SquareWidget), name="shapes")
    registry = make_registry()
    assert registry.names() == ["round", "square"]
    found = registry.get("square")
    assert found.cls is SquareWidget
    assert found.provider.plugin == "shapes"
    assert found.provider.distribution == "registered directly"


def test_unknown_name_lists_available_with_providers(plugin_manager):
    plugin_manager.register(Provides(round=RoundWidget), name="shapes")
    with pytest.raises(PluginError) as error:
        make_registry().get("rund")
    message = str(error.value)
    assert "\n" not in message
    assert "unknown widget 'rund' (from ZERO_TEST_WIDGET)" in message
    assert "did you mean 'round'?" in message
    assert "available: round (registered directly)" in message


def test_two_plugins_claiming_one_name_fail_naming_both(plugin_manager):
    plugin_manager.register(Provides(round=RoundWidget), name="first")
    plugin_manager.register(Provides(round=SquareWidget), name="second")
    with pytest.raises(PluginError, match="widget 'round' is registered twice: by plugin 'first'.*plugin 'second'"):
        make_registry().names()


def test_registering_a_class_of_the_wrong_type_fails(plugin_manager):
    plugin_manager.register(Provides(bad=dict), name="wrong")
    with pytest.raises(PluginError, match="not a subclass of .*Widget"):
        make_registry().names()


def test_requested_name_comes_from_the_environment(monkeypatch):
    registry = make_registry()
    monkeypatch.delenv("ZERO_TEST_WIDGET", raising=False)
    assert registry.requested_name() is None
    monkeypatch.setenv("ZERO_TEST_WIDGET", "  ")
    assert registry.requested_name() is None
    monkeypatch.setenv("ZERO_TEST_WIDGET", " round ")
    assert registry.requested_name() == "round"


class ReadyWidget(Widget):
    @classmethod
    def available(cls):  # type: ignore[no-untyped-def]
        return True, "found"


class MissingWidget(Widget):
    @classmethod
    def available(cls):  # type: ignore[no-untyped-def]
        return False, "not installed"


class BrokenWidget(Widget):
    @classmethod
    def available(cls):  # type: ignore[no-untyped-def]
        raise RuntimeError("probe failed")


def make_selecting_registry() -> NamedRegistry[Widget]:
    return NamedRegistry(kind="widget", hook_name="zero_register_widgets", hookspecs=specs, base=Widget,
                         env_var="ZERO_TEST_WIDGET", default="ready")


def test_selected_name_is_the_variable_else_the_default(monkeypatch):
    registry = make_selecting_registry()
    monkeypatch.delenv("ZERO_TEST_WIDGET", raising=False)
    assert registry.selected_name() == "ready"
    monkeypatch.setenv("ZERO_TEST_WIDGET", "missing")
    assert registry.selected_name() == "missing"
    monkeypatch.delenv("ZERO_TEST_WIDGET")
    assert make_registry().selected_name() is None  # no default: the caller chooses


def test_statuses_give_reasons_and_report_a_broken_check(plugin_manager, monkeypatch):
    monkeypatch.delenv("ZERO_TEST_WIDGET", raising=False)
    plugin_manager.register(Provides(ready=ReadyWidget, missing=MissingWidget, broken=BrokenWidget), name="w")
    registry = make_selecting_registry()
    rows = {row["name"]: row for row in registry.statuses()}
    assert rows["ready"] == {"name": "ready", "available": True, "reason": "found",
                             "distribution": "registered directly", "selected": True}
    assert rows["missing"]["reason"] == "not installed" and not rows["missing"]["selected"]
    assert rows["broken"]["available"] is False
    assert rows["broken"]["reason"] == "available() raised RuntimeError('probe failed')"
    assert registry.usable_listing() == "ready (registered directly)"
    assert [row["name"] for row in registry.statuses(selected="missing") if row["selected"]] == ["missing"]


def test_shared_instance_is_made_once_per_name_and_class(plugin_manager):
    plugin_manager.register(Provides(ready=ReadyWidget), name="w")
    registry = make_selecting_registry()
    made: list[str] = []

    def make(name, cls):  # type: ignore[no-untyped-def]
        made.append(name)
        return cls()

    first = registry.shared_instance("ready", make)
    assert registry.shared_instance("ready", make) is first and made == ["ready"]
    plugin_manager.register(Provides(missing=MissingWidget), name="more")  # a new plugin re-resolves names
    assert registry.shared_instance("ready", make) is first and made == ["ready"]
