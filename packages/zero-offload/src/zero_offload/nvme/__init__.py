"""NVMe offload: the `nvme` offload device, its swap space and run directories (docs/offload.md, "NVMe offload")."""
from ._device import NvmeOffloadDevice
from ._run_dir import RUN_PREFIX, SwapDirectory, remove_stale_runs

__all__ = ["RUN_PREFIX", "NvmeOffloadDevice", "SwapDirectory", "remove_stale_runs"]
