"""How the engine treats fake tensors (`zero profile --dry-run`, zero_core.dryrun): shapes, no values.

While a dry run is on, the storage tracker counts fake tensors as it counts real ones (outside one, a fake
tensor belongs to a compiler's trace and is never memory). The engine reads a value in three places (the
gradient norm, the NaN-loss flag, the swap directory's id); on a fake tensor each read takes the stand-in its
caller names: the value of an ordinary step (finite gradients, a finite loss), so the dry run takes the path
that training takes.
"""
from __future__ import annotations

import sys

import torch

_counting = False


def count_fake_tensors(enabled: bool) -> None:
    """Let the storage tracker count fake tensors (a dry run) or skip them (the default)."""
    global _counting
    _counting = enabled


def counts_fake_tensors() -> bool:
    return _counting


def is_fake(tensor: torch.Tensor) -> bool:
    # No tensor is fake before torch's fake-tensor module is imported; importing it here, inside a tracked
    # region, would count the module's own constant tensors as the region's.
    module = sys.modules.get("torch._subclasses.fake_tensor")
    return module is not None and isinstance(tensor, module.FakeTensor)


def read_float(tensor: torch.Tensor, *, if_fake: float) -> float:
    """`tensor.item()` as a float; `if_fake` for a fake tensor, which has no value."""
    return if_fake if is_fake(tensor) else float(tensor.item())


def read_int(tensor: torch.Tensor, *, if_fake: int) -> int:
    """`tensor.item()` as an int; `if_fake` for a fake tensor, which has no value."""
    return if_fake if is_fake(tensor) else int(tensor.item())


def read_bool(tensor: torch.Tensor, *, if_fake: bool) -> bool:
    """`bool(tensor)`; `if_fake` for a fake tensor, which has no value."""
    return if_fake if is_fake(tensor) else bool(tensor)
