"""Checks on the tensors handed to pin backends."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from ._errors import PinError


def check_pinnable(tensor: object, make_copy: bool = True) -> None:
    """Reject, in one line with the fix, what no backend can pin."""
    if not isinstance(tensor, torch.Tensor):
        raise PinError(f"pin_memory expects a torch.Tensor, got {type(tensor).__name__}; "
                       "convert it first with torch.as_tensor(...)")
    if tensor.layout != torch.strided:
        raise PinError(f"cannot pin a {tensor.layout} tensor: only dense tensors can be pinned; "
                       "call .to_dense() first")
    if make_copy and holds_no_data(tensor):
        raise PinError("cannot copy a meta or fake tensor into pinned memory: it holds no data; "
                       "pass make_copy=False for an uninitialised pinned buffer of its size")


def holds_no_data(tensor: torch.Tensor) -> bool:
    """Meta and fake tensors have a shape and dtype but no memory (fake ones claim a real device)."""
    return tensor.is_meta or is_fake(tensor)


def host_extent(tensor: torch.Tensor) -> tuple[int, int] | None:
    """The [first, end) byte addresses a dense CPU tensor spans, or None if it has no host memory."""
    if (not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided
            or tensor.device.type != "cpu" or holds_no_data(tensor)):
        return None
    # From the storage: data_ptr() is 0 for an empty tensor, even a slice of pinned memory.
    # int(): sizes may be typed SymInt, but a tensor with host memory has concrete ones.
    start = tensor.untyped_storage().data_ptr() + int(tensor.storage_offset()) * tensor.element_size()
    if tensor.numel() == 0:
        return start, start
    last = sum((int(size) - 1) * int(stride) for size, stride in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * tensor.element_size()
