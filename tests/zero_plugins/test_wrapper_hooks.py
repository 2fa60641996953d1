"""Hook wrappers are rejected: zero calls each hook implementation directly, so a wrapper would never run."""
from __future__ import annotations

import sys
import types
from collections.abc import Callable, Generator

import pluggy
import pytest
from zero_plugins import NamedRegistry, PluginError, hookimpl, hookspec, plain_hookimpls, use_hookspecs


class Gadget:
    pass


class Sprocket(Gadget):
    pass


specs = types.ModuleType("gadget_specs")


@hookspec
def zero_register_gadgets(register: Callable[[str, type], None]) -> None:
    """Test hook."""


specs.zero_register_gadgets = zero_register_gadgets
sys.modules[specs.__name__] = specs


def make_registry() -> NamedRegistry[Gadget]:
    return NamedRegistry(
        kind="gadget", hook_name="zero_register_gadgets", hookspecs=specs, base=Gadget, env_var="ZERO_TEST_GADGET"
    )


class Plain:
    @hookimpl
    def zero_register_gadgets(self, register: Callable[[str, type], None]) -> None:
        register("sprocket", Sprocket)


class NewStyleWrapper:
    @hookimpl(wrapper=True)
    def zero_register_gadgets(self, register: Callable[[str, type], None]) -> Generator[None, None, None]:
        register("never", Sprocket)  # never runs: calling a generator function only makes a generator
        return (yield)


class OldStyleWrapper:
    @hookimpl(hookwrapper=True)
    def zero_register_gadgets(self, register: Callable[[str, type], None]) -> Generator[None, None, None]:
        register("never", Sprocket)
        yield


@pytest.mark.parametrize(
    ("plugin", "option"), [(NewStyleWrapper(), "wrapper=True"), (OldStyleWrapper(), "hookwrapper=True")]
)
def test_a_registry_rejects_a_wrapper_naming_plugin_hook_and_fix(
    plugin_manager: pluggy.PluginManager, plugin: object, option: str
) -> None:
    plugin_manager.register(Plain(), name="plain")
    plugin_manager.register(plugin, name="wrapping")
    with pytest.raises(PluginError) as error:
        make_registry().names()
    message = str(error.value)
    assert "\n" not in message
    assert "plugin 'wrapping' (registered directly)" in message
    assert f"implements zero_register_gadgets with @hookimpl({option})" in message
    assert "implement it as a plain hook" in message


def test_plain_implementations_are_returned_in_order(plugin_manager: pluggy.PluginManager) -> None:
    first, second = Plain(), Plain()
    plugin_manager.register(first, name="first")
    plugin_manager.register(second, name="second")
    manager = use_hookspecs(specs)
    impls = plain_hookimpls(manager, "zero_register_gadgets")
    assert [impl.plugin_name for impl in impls] == ["first", "second"]


def test_plain_hooks_still_register(plugin_manager: pluggy.PluginManager) -> None:
    plugin_manager.register(Plain(), name="plain")
    assert make_registry().get("sprocket").cls is Sprocket


class WrappingCommands:
    @hookimpl(wrapper=True)
    def zero_register_commands(self, cli: object) -> Generator[None, None, None]:
        return (yield)


def test_the_cli_rejects_a_wrapped_command_hook(
    plugin_manager: pluggy.PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    # The zero-plugins tox environments install no zero-cli. (Not importorskip("zero_cli"): without
    # the package, tests/zero_cli would import as a namespace package of that name.)
    main = pytest.importorskip("zero_cli._main").main
    plugin_manager.register(WrappingCommands(), name="wrapping-commands")
    assert main(["plugins"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zero: error: plugin 'wrapping-commands' (registered directly) implements ")
    assert "zero_register_commands with @hookimpl(wrapper=True)" in err
    assert "implement it as a plain hook" in err
