"""The build steps every stage shares, once: the context a builder works in, the broadcast of
the initial weights, and the placement and casting of frozen parameters and buffers.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from zero_plugins import Category

from ..comm import Collectives
from ..memory import MemoryLedger
from ._homes import Homes
from ._policy import StagePolicy

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig


@dataclass(frozen=True)
class BuildContext:
    """What a stage's builder needs: the settings, the process group, and where and in which dtype state goes."""

    config: ZeroConfig
    policy: StagePolicy
    comm: Collectives
    ledger: MemoryLedger
    device: torch.device
    dtype: torch.dtype
    order: dict[int, int]  # id(param) -> its position in model.parameters(); gradients arrive roughly in reverse
    homes: Homes  # each copy's home, where the policy places it

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    @property
    def bucket_numel(self) -> int:
        return self.config.zero_optimization.reduce_bucket_size

    def compute_dtype_of(self, tensor: torch.Tensor) -> torch.dtype:
        """Floating tensors take the compute dtype (DeepSpeed casts the whole module); others keep theirs."""
        return self.dtype if tensor.is_floating_point() else tensor.dtype


def broadcast_initial_weights(tensors: Iterable[torch.Tensor], comm: Collectives) -> None:
    """Start every rank from rank 0's weights and buffers, as DeepSpeed does."""
    if comm.world_size == 1:
        return
    with torch.no_grad():
        for tensor in tensors:
            comm.broadcast(tensor.data)


def place_frozen(params: Iterable[torch.nn.Parameter], context: BuildContext) -> None:
    """Whole frozen (or persistent, untrained) parameters on the device, in the compute dtype."""
    for param in params:
        param.data = param.data.to(device=context.device, dtype=context.compute_dtype_of(param))
        context.ledger.register(param.data, Category.PARAM_PERSISTENT)


def place_buffers(model: torch.nn.Module, context: BuildContext) -> None:
    """The model's buffers on the device; floating ones in the compute dtype."""
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None:
                placed = buffer.to(device=context.device, dtype=context.compute_dtype_of(buffer))
                module._buffers[name] = context.ledger.register(placed, Category.MODULE_BUFFERS)
