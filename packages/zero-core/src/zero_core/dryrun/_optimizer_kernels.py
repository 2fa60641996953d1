"""torch's optimizers, inside a dry run, take the kernels they would take on the target device's real tensors.

torch picks an optimizer's implementation (foreach, fused or single-tensor) in
`torch.optim.optimizer._default_to_fused_or_foreach`, by each parameter's exact type (`Tensor` or `Parameter`)
and device type (foreach on cuda, ...; never on cpu), and checks a `fused=True` request against the devices
with fused kernels. A fake tensor is neither type, and a CUDA target's are on the lazy device
(_allocator.py, TRACED_DEVICE): unaided, a dry run would step a CUDA target tensor by tensor and miss the
foreach step's list of temporaries (AdamW's sqrt(v) for every stepped tensor at once), and refuse `fused`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.optim.optimizer as torch_optimizer
from torch._subclasses.fake_tensor import FakeTensor

from ._allocator import TARGET_OF

# The module globals torch's decision reads at every call. Each torch.optim module imports the decision function
# by name, so replacing it would take one patch per module; these are read from torch_optimizer alone.
_DEVICE_LISTS = ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices")


@contextmanager
def target_optimizer_kernels(traced: str) -> Iterator[None]:
    """For the block, torch's decision sees a fake tensor as the plain tensor it stands for, and the `traced`
    device type as the target's; restored on exit. The decision is torch's own code, so its rules (and a
    config's explicit `foreach` or `fused`) stand as they do on a real run."""
    # The type list is extended in place: torch appends to it too (DTensor, on import), and that must outlast us.
    types = torch_optimizer._foreach_supported_types
    added = FakeTensor not in types
    if added:
        types.append(FakeTensor)
    saved = {name: getattr(torch_optimizer, name) for name in _DEVICE_LISTS}
    for name, devices in saved.items():
        setattr(torch_optimizer, name, _with_traced(devices, traced))
    try:
        yield
    finally:
        for name, devices in saved.items():
            setattr(torch_optimizer, name, devices)
        if added:
            types.remove(FakeTensor)


def _with_traced(devices: Callable[[], list[str]], traced: str) -> Callable[[], list[str]]:
    """torch's list of device types, with `traced` where its target is on it (a CPU target's is the CPU itself)."""

    def supported() -> list[str]:
        listed = devices()
        return [*listed, traced] if TARGET_OF[traced] in listed and traced not in listed else listed

    return supported
