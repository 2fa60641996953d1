"""Where each copy of the training state is allocated, and how data moves to and from offloaded copies.

The stage policy places each copy (parameters, gradients, master, optimizer state) on the
device or at an offload device (zero_core.offload). `StateHomes` allocates every copy the
builders make where the policy puts it, and routes copies between the device and an
offloaded copy through the offload device, which overlaps them with compute where the
accelerator can. On the CPU accelerator the same calls run, and the copies are plain.
"""
from __future__ import annotations

import torch
from zero_plugins import Category

from ..memory import MemoryLedger
from ..offload import OffloadDevice
from ._swap_pool import SwapPool, SwappedTensor, SwapSettings


class StateHomes:
    def __init__(self, device: torch.device, ledger: MemoryLedger, optimizer: OffloadDevice | None,
                 parameters: OffloadDevice | None, swap: SwapSettings | None = None,
                 param_swap: SwapSettings | None = None) -> None:
        """`optimizer`: where master, fp32 gradients and optimizer state live, if offloaded;
        `parameters`: where stage 3's 16-bit partitions live, if offloaded; `swap`: how the step swaps
        the master and optimizer state, when the optimizer's device keeps them in swap space;
        `param_swap`: the buffers for stage 3's partitions, when the parameters' device has swap space."""
        self.device = device
        self.ledger = ledger
        self.optimizer = optimizer
        self.parameters = parameters
        space = optimizer.swap_space if optimizer is not None else None
        self.swap_pool: SwapPool | None = None
        if space is not None:
            if swap is None:
                raise ValueError("an optimizer offload device with swap space needs SwapSettings")
            self.swap_pool = SwapPool(space, swap)
        self._param_swap = param_swap if parameters is not None and parameters.swap_space is not None else None
        self._param_pool: SwapPool | None = None

    @property
    def parameters_swappable(self) -> bool:
        """Whether stage 3's partitions can live in swap space (offload_param at an NVME device)."""
        return self._param_swap is not None

    def param_pool(self) -> SwapPool:
        """The buffers partitions in swap space are read into, allocated when the first partition goes there."""
        if self._param_pool is None:
            if self._param_swap is None or self.parameters is None or self.parameters.swap_space is None:
                raise RuntimeError("the parameters' offload device has no swap space")
            self._param_pool = SwapPool(self.parameters.swap_space, self._param_swap)
        return self._param_pool

    @property
    def master_swapped(self) -> bool:
        """Whether the fp32 master and the optimizer state live in swap space (NVMe), not in memory."""
        return self.swap_pool is not None

    def swap_pool_or_fail(self) -> SwapPool:
        if self.swap_pool is None:
            raise RuntimeError("the master is not swapped: no swap pool")
        return self.swap_pool

    def swapped_master(self, name: str, values: torch.Tensor) -> SwappedTensor:
        """An fp32 master tensor in swap space named `name`, holding `values` (a transient host tensor)."""
        pool = self.swap_pool_or_fail()
        swapped = SwappedTensor(name, values.numel(), pool.settings.buffer_numel, pool, Category.OPTIM_MASTER)
        return swapped.copy_(values)

    # --- allocation ---
    def master(self, numel: int) -> torch.Tensor:
        """A zeroed fp32 master tensor (`optim.master`)."""
        return self._allocate(self.optimizer, numel, torch.float32, Category.OPTIM_MASTER, pin=False)

    def step_grads(self, numel: int) -> torch.Tensor:
        """A persistent fp32 gradient buffer at the offload device, that whole gradients are copied
        into for the step (`optim.grad`); only when the optimizer is offloaded."""
        assert self.optimizer is not None
        return self.optimizer.allocate(numel, torch.float32, Category.OPTIM_GRAD, pin=True)

    def grad_partition(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A zeroed gradient partition (`grad.partition`): fp32 at the offload device when the optimizer
        is offloaded, so reduced gradients land where the step reads them; else in `dtype` on the device."""
        if self.optimizer is not None:
            return self.optimizer.allocate(numel, torch.float32, Category.GRAD_PARTITION, pin=True)
        return self._allocate(None, numel, dtype, Category.GRAD_PARTITION, pin=False)

    def _allocate(self, offload: OffloadDevice | None, numel: int, dtype: torch.dtype, category: Category,
                  pin: bool) -> torch.Tensor:
        if offload is not None:
            return offload.allocate(numel, dtype, category, pin)
        return self.ledger.new(category, lambda: torch.zeros(numel, dtype=dtype, device=self.device))

    def master_is_copy(self, dtype: torch.dtype) -> bool:
        """Whether the fp32 master must be a copy: 16-bit compute, or the master and the parameters
        it updates live apart (one of them offloaded). Else it is a view of the fp32 parameters."""
        return dtype != torch.float32 or self.optimizer is not None or self.parameters is not None

    # --- movement ---
    @property
    def optimizer_offloaded(self) -> bool:
        return self.optimizer is not None

    @property
    def parameters_offloaded(self) -> bool:
        return self.parameters is not None

    def grads_to_optimizer(self, target: torch.Tensor, source: torch.Tensor, accumulate: bool) -> None:
        """Gradients from the device into a gradient copy of the optimizer's (offloaded or not)."""
        if self.optimizer is not None:
            self.optimizer.to_host(target, source, accumulate)
        elif accumulate:
            target.add_(source)
        else:
            target.copy_(source)

    def master_to_params(self, target: torch.Tensor, master: torch.Tensor, target_offloaded: bool) -> None:
        """Updated master values into compute-dtype parameters (`target_offloaded`: a host partition)."""
        if self.optimizer is not None and not target_offloaded:
            self.optimizer.to_device(target, master)
        elif self.optimizer is None and target_offloaded:
            assert self.parameters is not None
            self.parameters.to_host(target, master, accumulate=False)
        else:
            target.copy_(master)

    def close(self) -> None:
        """Release what the offload devices hold besides tensors (swap files, I/O workers)."""
        for offload in (self.optimizer, self.parameters):
            if offload is not None:
                offload.close()

    def synchronize(self) -> None:
        """Wait for every copy to and from the offload devices."""
        for offload in (self.optimizer, self.parameters):
            if offload is not None:
                offload.synchronize()
