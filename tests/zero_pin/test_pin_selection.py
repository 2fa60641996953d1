"""Selection by DS_PIN_MEMORY_BACKEND, plugin registration and the status rows."""
from __future__ import annotations

import pytest
import torch

import zero_pin
from zero_pin._native_backend import NativeBackend
from zero_pin._torch_backend import TorchBackend
from zero_plugins import PluginError, get_plugin_manager, hookimpl


class CloneBackend(zero_pin.PinBackend):
    """A third party's backend: copies into fresh memory, accounted while that storage lives."""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "copies into fresh memory"

    def pin_memory(self, tensor, make_copy=True, match_shape=True):
        pinned = tensor.clone()
        zero_pin.track_pinned_storage(self.name, pinned)
        return pinned

    def is_pinned(self, tensor):
        return False

    def unpin_memory(self, tensor):
        return False


class Plugin:
    def __init__(self, name: str, cls: type) -> None:
        self.name, self.cls = name, cls

    @hookimpl
    def zero_register_pin_backends(self, register):
        register(self.name, self.cls)


@pytest.fixture
def register_plugin():
    manager = get_plugin_manager()
    registered = []

    def register(name: str, cls: type) -> None:
        plugin = Plugin(name, cls)
        manager.register(plugin, name=f"test-{name}")
        registered.append(plugin)

    yield register
    for plugin in registered:
        manager.unregister(plugin)


def test_torch_is_the_default():
    assert type(zero_pin.get_backend()) is TorchBackend
    assert zero_pin.get_backend() is zero_pin.get_backend("torch")


def test_env_selects_native(monkeypatch, native):
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    assert type(zero_pin.get_backend()) is NativeBackend
    assert zero_pin.get_backend() is native  # one instance for the whole process
    assert zero_pin.is_pinned(zero_pin.pin_memory(torch.ones(4)))


def test_plugin_backend_is_selected_by_env(monkeypatch, register_plugin):
    register_plugin("clone", CloneBackend)
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "clone")
    assert type(zero_pin.get_backend()) is CloneBackend
    source = torch.arange(256, dtype=torch.float64)
    pinned = zero_pin.pin_memory(source)
    assert torch.equal(pinned, source)
    assert zero_pin.pinned_memory_stats()["backends"]["clone"]["current"] == source.nbytes
    del pinned
    assert zero_pin.pinned_memory_stats()["backends"]["clone"] == {"current": 0, "peak": source.nbytes}
    row = next(s for s in zero_pin.backend_statuses() if s["name"] == "clone")
    assert row == {"name": "clone", "available": True, "reason": "copies into fresh memory",
                   "distribution": "registered directly", "selected": True}


def test_unknown_name_fails_in_one_line_listing_the_backends(monkeypatch):
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "bogus")
    with pytest.raises(PluginError) as error:
        zero_pin.pin_memory(torch.ones(2))
    message = str(error.value)
    assert "\n" not in message
    assert "'bogus'" in message and "DS_PIN_MEMORY_BACKEND" in message
    assert "native (zero-pin)" in message and "torch (zero-pin)" in message


def test_two_plugins_claiming_one_name_fail(register_plugin):
    register_plugin("torch", CloneBackend)
    with pytest.raises(PluginError, match="registered twice"):
        zero_pin.get_backend("torch")


def test_a_class_that_is_not_a_pin_backend_is_rejected(register_plugin):
    register_plugin("wrong", dict)
    with pytest.raises(PluginError, match="not a subclass of zero_pin._backend.PinBackend"):
        zero_pin.available_backends()


def test_available_backends_are_classes_that_report_availability():
    backends = zero_pin.available_backends()
    assert {"torch", "native"} <= set(backends)
    for cls in backends.values():
        assert issubclass(cls, zero_pin.PinBackend)
        available, reason = cls.available()
        assert isinstance(available, bool) and reason


def test_backend_statuses_mark_the_selected_one(monkeypatch):
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    rows = {row["name"]: row for row in zero_pin.backend_statuses()}
    assert set(rows["native"]) == {"name", "available", "reason", "distribution", "selected"}
    assert rows["native"]["selected"] and not rows["torch"]["selected"]
    assert rows["torch"]["distribution"] == "zero-pin"


def test_importing_zero_pin_and_its_entry_point_does_not_import_torch(run_python):
    result = run_python(
        "import json, sys, zero_pin, zero_pin._plugin; print(json.dumps('torch' in sys.modules))"
    )
    assert result.data is False
