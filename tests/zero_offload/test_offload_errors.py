"""Offload that cannot run fails at `initialize` with one line naming the problem, the numbers and the fix.

- a device no installed plugin provides (zero-offload missing, blocked, or a name nobody registers);
- pinned memory over RLIMIT_MEMLOCK, checked for real in a process that may not lock past it;
- host memory too small for what offload will hold on this node (the available figure lowered).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from typing import Any

import pytest
import torch

import zero_core
from zero_plugins.ds_config import ConfigError

pytestmark = pytest.mark.usefixtures("solo_process_group")


def _config(**offload: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 2, **offload}}


def _initialize(config: dict[str, Any]) -> None:
    zero_core.initialize(model=torch.nn.Linear(8, 8), config=config)


def test_a_device_nobody_registers_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError) as error:
        _initialize(_config(offload_optimizer={"device": "gpu"}))
    assert str(error.value) == ("zero_optimization.offload_optimizer.device: offload device 'gpu' is not available: "
                                "no installed plugin provides it; devices available: cpu, nvme")


def test_offload_with_zero_offload_blocked_names_the_variable(monkeypatch: pytest.MonkeyPatch, plugin_manager) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ZERO_DISABLE_PLUGINS", "offload")
    from zero_plugins import reset_plugin_manager

    reset_plugin_manager()
    with pytest.raises(ConfigError) as error:
        _initialize(_config(offload_optimizer={"device": "cpu"}))
    assert "zero-offload is installed but blocked by ZERO_DISABLE_PLUGINS=offload" in str(error.value)
    assert "\n" not in str(error.value)


def test_offload_without_zero_offload_says_pip_install(monkeypatch: pytest.MonkeyPatch, plugin_manager) -> None:  # type: ignore[no-untyped-def]
    # As on a machine where the distribution is absent: its entry point is not loaded and its metadata is missing.
    monkeypatch.setenv("ZERO_DISABLE_PLUGINS", "offload")
    real = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name == "zero-offload":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    from zero_plugins import reset_plugin_manager

    reset_plugin_manager()
    with pytest.raises(ConfigError) as error:
        _initialize(_config(offload_param={"device": "cpu"}, stage=3))
    assert str(error.value) == ("zero_optimization.offload_param.device: offload device 'cpu' is not available: "
                                "zero-offload is not installed (pip install zero-offload); devices available: none")


def test_too_little_host_memory_names_both_figures_and_the_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    import zero_offload._capacity as capacity

    monkeypatch.setattr(capacity, "available_host_memory", lambda: 1024)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ConfigError) as error:
        _initialize(_config(offload_optimizer={"device": "cpu"}))
    message = str(error.value)
    # 72 trainable elements on one rank: 16 B each (fp32 master, fp32 gradients, Adam's m and v)
    assert message == ("zero_optimization.offload_optimizer.device: offloading needs 1.12 KiB of host memory per rank, "
                       "4.50 KiB for the 4 rank(s) on this host, but 1.00 KiB is available; use fewer ranks per node, "
                       "offload to nvme, or free host memory")


# Runs in a fresh interpreter that loads the native op first, then caps RLIMIT_MEMLOCK at 1 MiB and,
# as root, becomes `nobody` (dropping CAP_IPC_LOCK, which would let it lock past the limit).
CHILD = r"""
import json, os, resource, torch, zero_core, zero_pin
from zero_plugins.ds_config import ConfigError
from zero_pin._memlock import can_lock_beyond_limit
zero_pin.get_backend("native").pin_memory(torch.ones(1))
resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
out = {"privileged": can_lock_beyond_limit()}
config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
try:
    zero_core.initialize(model=torch.nn.Linear(1024, 512), config=config)
except ConfigError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads capabilities from /proc")
def test_pinned_memory_over_the_memlock_limit_fails_before_allocating(native_pin_backend: object) -> None:
    env = {**os.environ, "DS_PIN_MEMORY_BACKEND": "native"}
    result = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if out["privileged"]:
        pytest.skip("this process keeps CAP_IPC_LOCK without root (ambient capability)")
    message = out["error"]
    assert "\n" not in message
    # 524,800 trainable elements: 4 B each of pinned fp32 gradients
    assert message.startswith("zero_optimization.offload_optimizer.pin_memory: offloading pins 2.00 MiB per rank, "
                              "over the locked-memory limit: cannot pin 2.00 MiB: RLIMIT_MEMLOCK is 1.00 MiB")
    assert "ulimit -l" in message and "pin_memory: false" in message
