"""`deepspeed.checkpoint.utils`: the helper accelerate calls when it saves a stage-0-2 model's state dict."""
from __future__ import annotations

from typing import TypeVar

import torch

Item = TypeVar("Item")


def clone_tensors_for_torch_save(item: Item, device: torch.device | str = "cpu") -> Item:
    """`item` with every tensor in it (nested in lists, tuples and dicts) copied onto `device`, detached.

    A copy owns its storage, so `torch.save` writes only the tensor's elements, not the whole flat buffer a
    view of it shares (zero's stage 1-2 parameters are views of one buffer). Anything else is returned as is.
    """
    target = torch.device(device)
    if isinstance(item, torch.Tensor):
        copied = item.detach().clone() if item.device == target else item.detach().to(target)
        return copied  # type: ignore[return-value]
    if isinstance(item, list):
        return [clone_tensors_for_torch_save(value, target) for value in item]  # type: ignore[return-value]
    if isinstance(item, tuple):
        return tuple(clone_tensors_for_torch_save(value, target) for value in item)  # type: ignore[return-value]
    if isinstance(item, dict):
        return type(item)((key, clone_tensors_for_torch_save(value, target)) for key, value in item.items())
    return item
