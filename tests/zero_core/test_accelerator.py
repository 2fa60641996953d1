"""Accelerator selection (DS_ACCELERATOR, auto-detection, plugins) and the CPU accelerator's figures."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from zero_core.accelerator import (
    Accelerator,
    AcceleratorUnavailable,
    accelerator_registry,
    get_accelerator,
    reset_accelerator,
    select_accelerator,
    set_accelerator,
)
from zero_core.accelerator.cpu import CpuAccelerator
from zero_core.accelerator.cuda import CudaAccelerator
from zero_core.memory import StorageTracker
from zero_plugins import PluginError, hookimpl


@pytest.fixture(autouse=True)
def fresh_selection(monkeypatch):
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    reset_accelerator()
    yield
    reset_accelerator()


class PriorityCpu(CpuAccelerator):
    """A third-party accelerator that outranks cuda in auto-detection."""

    name = "priority-cpu"
    detect_priority = 1000


class ProvidesPriorityCpu:
    @hookimpl
    def zero_register_accelerators(self, register):  # type: ignore[no-untyped-def]
        register("priority-cpu", PriorityCpu)


def test_builtin_accelerators_come_from_zero_core_entry_point(plugin_manager):
    registrations = accelerator_registry.registrations()
    assert registrations["cpu"].cls is CpuAccelerator
    assert registrations["cuda"].cls is CudaAccelerator
    assert {reg.provider.distribution for reg in registrations.values()} == {"zero-core"}


def test_auto_detection_picks_cpu_here_and_says_why(plugin_manager):
    selection = select_accelerator()
    if CudaAccelerator.is_available():
        pytest.skip("a GPU is visible")
    assert selection.accelerator.name == "cpu"
    assert "auto-detected" in selection.reason and "cuda:" in selection.reason


def test_ds_accelerator_selects_by_name(monkeypatch, plugin_manager):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert isinstance(get_accelerator(), CpuAccelerator)
    assert get_accelerator() is get_accelerator()


def test_unknown_accelerator_names_the_available_ones(monkeypatch, plugin_manager):
    monkeypatch.setenv("DS_ACCELERATOR", "nope")
    with pytest.raises(PluginError, match=r"unknown accelerator 'nope'.*available: cpu \(zero-core\), cuda \(zero-core\)"):
        get_accelerator()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_unavailable_accelerator_is_an_error_not_a_fallback(monkeypatch, plugin_manager):
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with pytest.raises(AcceleratorUnavailable, match="DS_ACCELERATOR=cuda but it cannot run here"):
        get_accelerator()


def test_plugin_accelerator_wins_auto_detection_and_is_selectable(monkeypatch, plugin_manager):
    plugin_manager.register(ProvidesPriorityCpu(), name="priority")
    assert select_accelerator().accelerator.name == "priority-cpu"
    monkeypatch.setenv("DS_ACCELERATOR", "priority-cpu")
    assert isinstance(get_accelerator(), PriorityCpu)


def test_set_accelerator_overrides_selection(plugin_manager):
    mine = CpuAccelerator()
    set_accelerator(mine)
    assert get_accelerator() is mine


def test_cuda_accelerator_registers_without_touching_cuda():
    """Importing and registering must not initialise CUDA, so CPU-only machines can list it."""
    code = (
        "import torch, zero_core.accelerator as a;"
        "regs = a.accelerator_registry.registrations();"
        "assert 'cuda' in regs;"
        "print(torch.cuda.is_initialized())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_abstract_accelerator_cannot_be_instantiated():
    with pytest.raises(TypeError):
        Accelerator()  # type: ignore[abstract]


class TestCpuAccelerator:
    def setup_method(self):
        self.cpu = CpuAccelerator()

    def test_devices_and_backend(self):
        assert self.cpu.communication_backend_name() == "gloo"
        assert self.cpu.device() == torch.device("cpu")
        assert self.cpu.device_count() == 1
        assert self.cpu.supported_dtypes() == [torch.float32, torch.bfloat16, torch.float16]
        self.cpu.set_device(1)  # DeepSpeed's CPU accelerator ignores the index: every rank's device is the host
        assert self.cpu.current_device() == 0

    def test_manual_seed_is_reproducible(self):
        self.cpu.manual_seed(7)
        first = torch.rand(3)
        self.cpu.manual_seed(7)
        assert torch.equal(first, torch.rand(3))

    def test_outside_a_tracker_figures_are_process_rss(self):
        import psutil

        assert self.cpu.memory_stats_source() == "process RSS"
        rss = psutil.Process().memory_info().rss
        assert abs(self.cpu.memory_allocated() - rss) < 64 * 2**20
        assert self.cpu.max_memory_allocated() >= self.cpu.memory_allocated() - 64 * 2**20
        assert 0 < self.cpu.available_memory() <= self.cpu.total_memory()

    def test_peak_rss_resets_to_current(self):
        big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del big
        before = self.cpu.max_memory_reserved()
        self.cpu.reset_peak_memory_stats()
        after = self.cpu.max_memory_reserved()
        assert after < before
        assert after >= self.cpu.memory_reserved() - 8 * 2**20

    def test_inside_a_tracker_figures_are_exact(self):
        with StorageTracker():
            assert self.cpu.memory_stats_source() == "storage tracker"
            a = torch.empty(1000, dtype=torch.float32)
            b = torch.empty(500, dtype=torch.bfloat16)
            assert self.cpu.memory_allocated() == 4000 + 1000
            del b
            assert self.cpu.memory_allocated() == 4000
            assert self.cpu.max_memory_allocated() == 5000
            self.cpu.reset_peak_memory_stats()
            assert self.cpu.max_memory_allocated() == 4000
            del a
        assert self.cpu.memory_stats_source() == "process RSS"
