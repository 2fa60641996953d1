"""The interface of an offload device: where offloaded copies live and how they move.

zero-core never imports an implementation: zero-offload registers `cpu` (and `nvme`)
through the `zero_register_offload_devices` hook, a third party may register more, and
the engine asks the registry for the device a ds_config names.

A device's copies return the transfer in flight (zero_core.accelerator.Transfer), which only
their consumer waits for; a device written before copies had handles returns None from
`to_host`/`to_device`, which the engine takes as a completed transfer (`transfer_to_host`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, final

import torch
from zero_plugins import Category

from ..accelerator import COMPLETED, Transfer
from ..memory import MemoryLedger, Placement
from ._sizing import OffloadPlan, OptimizerCopies, ParameterCopies
from ._swap import SwapSettings, SwapSpace

if TYPE_CHECKING:
    from ..accelerator import Accelerator
    from zero_plugins.ds_config import AioConfig, OffloadOptimizerConfig, OffloadParamConfig


@dataclass(frozen=True)
class OffloadSettings:
    """What one offload device serves: a ds_config block (`offload_optimizer` or `offload_param`)."""

    block: OffloadOptimizerConfig | OffloadParamConfig
    block_path: str  # "zero_optimization.offload_optimizer", for messages
    aio: AioConfig
    accelerator: Accelerator
    ledger: MemoryLedger
    rank: int
    local_world_size: int  # ranks sharing this host's memory
    run_id: str = ""  # the same on every rank of one run, unique across runs: names a run's swap directory

    @property
    def pin_memory(self) -> bool:
        return bool(self.block.pin_memory)


class OffloadDevice(ABC):
    """Holds offloaded copies (fp32 master, gradients, optimizer state, parameter partitions) and
    moves data between them and the accelerator. One instance serves one ds_config block.
    """

    #: where the copies it allocates live
    placement: ClassVar[Placement]

    def __init__(self, settings: OffloadSettings) -> None:
        self.settings = settings

    @property
    def swap_space(self) -> SwapSpace | None:
        """Where the copies that live out of memory go (the master and optimizer state, or stage 3's
        partitions, at an NVME device); None for a device that keeps every copy in host memory."""
        return None

    def close(self) -> None:  # noqa: B027 - a device that holds no files or workers has nothing to release
        """Release what the device holds outside the tensors it allocated (swap files, I/O workers)."""

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the device can be used here, and why (or why not). Must not raise."""

    def plan(self, copies: OptimizerCopies | ParameterCopies) -> OffloadPlan:
        """This rank's bytes for `copies` (a device with swap space sizes its pool with that space's alignment)."""
        return copies.sized(pin=self.settings.pin_memory, alignment=1)

    @abstractmethod
    def check_capacity(self, plan: OffloadPlan) -> None:
        """Raise one clear error, before anything is allocated, if the plan cannot fit (memlock, host memory, disk)."""

    @abstractmethod
    def allocate(self, numel: int, dtype: torch.dtype, category: Category, *, pin: bool) -> torch.Tensor:
        """A zeroed 1-D tensor of host memory for an offloaded copy, registered in the ledger under
        `category` at this device's placement. `pin`: the copy is an end of device transfers, so it is
        pinned when the block's `pin_memory` allows (copies only the CPU step touches never are)."""

    @abstractmethod
    def to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> Transfer | None:
        """Start `host` = (or += with `accumulate`) `source`, a tensor on the accelerator, cast to host's dtype;
        the copy in flight, holding `source` until it is complete (None: complete when this returns)."""

    @abstractmethod
    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> Transfer | None:
        """Start `target` (on the accelerator) = `host`, cast to target's dtype; the copy in flight, holding
        `host` until it is complete (None: complete when this returns)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every copy issued so far is complete (the step's boundary)."""

    @final
    def transfer_to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> Transfer:
        """`to_host` as the engine calls it: always a transfer."""
        transfer = self.to_host(host, source, accumulate=accumulate)
        return COMPLETED if transfer is None else transfer

    @final
    def transfer_to_device(self, target: torch.Tensor, host: torch.Tensor) -> Transfer:
        """`to_device` as the engine calls it: always a transfer."""
        transfer = self.to_device(target, host)
        return COMPLETED if transfer is None else transfer

    @abstractmethod
    def optimizer_class(self, name: str) -> type[torch.optim.Optimizer] | None:
        """The CPU optimizer for the config's optimizer `name` (lower case: "adam", "adamw", "adagrad",
        "lion") when its state lives here, as DeepSpeed picks DeepSpeedCPUAdam; None keeps torch's."""


@dataclass(frozen=True)
class OpenedDevice:
    """An offload device the ds_config opened, and how copies in its swap space (if it has one) are buffered."""

    device: OffloadDevice
    swap: SwapSettings


@dataclass(frozen=True)
class OffloadDevices:
    optimizer: OpenedDevice | None = None  # holds master, fp32 gradients and optimizer state
    parameters: OpenedDevice | None = None  # holds stage 3's 16-bit partitions
