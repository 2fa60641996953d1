"""RLIMIT_MEMLOCK, checked for real in a process that may not exceed it."""
from __future__ import annotations

import resource
import sys

import pytest

import zero_pin

# Runs in a fresh interpreter. It loads the op while it may still read the build folder, then
# caps RLIMIT_MEMLOCK at 1 MiB and, as root, becomes `nobody`: that drops CAP_IPC_LOCK, which
# would otherwise let it lock past the limit.
CHILD = r"""
import errno, json, os, resource, torch, zero_pin
from zero_pin._memlock import can_lock_beyond_limit, locked_bytes
backend = zero_pin.get_backend("native")
backend.unpin_memory(backend.pin_memory(torch.ones(1)))  # import everything lazily imported
resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
out = {"privileged": can_lock_beyond_limit(), "before": locked_bytes()}
small = backend.pin_memory(torch.ones(64 * 1024, dtype=torch.uint8))
out["after_small"] = locked_bytes()
try:
    backend.pin_memory(torch.ones(2 << 20, dtype=torch.uint8))
except zero_pin.MemlockLimitError as error:
    out["error"] = str(error)
try:  # past our check, the kernel refuses as well
    backend._op.LockedBlock(2 << 20)
except OSError as error:
    out["kernel"] = [error.filename, errno.errorcode[error.errno]]
print(json.dumps(out))
"""


def test_memlock_limit_reports_the_rlimit():
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    as_bytes = lambda value: None if value == resource.RLIM_INFINITY else value  # noqa: E731
    assert zero_pin.memlock_limit() == {"soft": as_bytes(soft), "hard": as_bytes(hard)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmLck and capabilities from /proc")
def test_a_pin_over_the_limit_fails_naming_the_size_the_limit_and_the_fixes(native, run_python):
    out = run_python(CHILD).data
    if out["privileged"]:
        pytest.skip("this process keeps CAP_IPC_LOCK without root (ambient capability)")
    assert out["after_small"] - out["before"] == 64 * 1024  # under the limit: really locked
    message = out["error"]
    assert "\n" not in message
    assert "cannot pin 2.00 MiB: RLIMIT_MEMLOCK is 1.00 MiB" in message
    assert "ulimit -l" in message and "pin_memory: false" in message
    assert out["kernel"][0] == "mlock" and out["kernel"][1] in {"ENOMEM", "EAGAIN", "EPERM"}
