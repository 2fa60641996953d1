"""The `nvme` offload device: the fp32 master and optimizer state in swap files under `nvme_path`.

The fp32 gradients stay in (pinned) host memory, where backward adds reduced gradients as
with the `cpu` device, and copies to and from the accelerator go the same way; what moves
to the disk is the master and the optimizer state, 12 of the 16 bytes per trainable element
that CPU offload keeps in host memory (with Adam; `plan` sizes each optimizer's own state). The step streams them through
`buffer_count` staging buffers (zero_core.sharding.SwappedMaster).
"""
from __future__ import annotations

import os
from pathlib import Path

from zero_plugins.ds_config import ConfigError
from zero_core.memory import Placement
from zero_core.offload import OffloadPlan, OffloadSettings, OptimizerCopies, ParameterCopies, SwapSpace

from .._cpu_device import CpuOffloadDevice, backend_pins
from ..swap import buffered_from_env, check_direct_io, get_swap_backend
from ._capacity import check_disk_space
from ._run_dir import SwapDirectory
from ._space import NvmeSwapSpace


class NvmeOffloadDevice(CpuOffloadDevice):
    placement = Placement.NVME

    def __init__(self, settings: OffloadSettings) -> None:
        super().__init__(settings)
        root = settings.block.nvme_path
        if root is None:
            raise ConfigError(f"{settings.block_path}.nvme_path",
                              "is required with device nvme: a directory on a local NVMe drive, e.g. /local_nvme")
        if not settings.run_id:
            raise ConfigError(f"{settings.block_path}.device", "nvme needs the run id the engine shares across ranks")
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"{settings.block_path}.nvme_path", f"{root} cannot be created: {error.strerror}") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise ConfigError(f"{settings.block_path}.nvme_path", f"{root} is not writable by this process")
        buffered = buffered_from_env()
        if not buffered:
            check_direct_io(str(root))
        self._directory = SwapDirectory.open(root, settings.run_id, settings.rank)
        self._space = NvmeSwapSpace(self._directory, get_swap_backend(settings.aio, buffered=buffered),
                                    settings.ledger, settings.pin_memory)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "swap files with O_DIRECT through the selected swap backend (zero swap check)"

    @property
    def swap_space(self) -> SwapSpace:
        return self._space

    def plan(self, copies: OptimizerCopies | ParameterCopies) -> OffloadPlan:
        """The master and the optimizer state (or partitions past `max_in_cpu`) go to swap space. The swap
        buffers are pinned, and so exactly their aligned size, only where the pin backend really pins."""
        pinned = self.settings.pin_memory and backend_pins(self.settings.accelerator)
        return copies.sized(pin=pinned, alignment=self._space.slot_alignment)

    def check_capacity(self, plan: OffloadPlan) -> None:
        super().check_capacity(plan)
        check_disk_space(plan, self.settings, self._directory.root)

    def close(self) -> None:
        self._space.close()
