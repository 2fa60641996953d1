"""The CUDA accelerator. Importing and registering it never touches CUDA; only its methods do."""
from __future__ import annotations

import torch

from ._cuda_copies import CudaCopyStream
from ._rulers import CudaAllocatorRuler
from .abstract import Accelerator


class CudaAccelerator(Accelerator):
    name = "cuda"
    detect_priority = 100

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if torch.version.cuda is None:
            return False, f"torch {torch.__version__} was built without CUDA"
        if not torch.cuda.is_available():
            return False, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)"
        return True, f"{torch.cuda.device_count()} device(s), CUDA {torch.version.cuda}"

    def communication_backend_name(self) -> str:
        return "nccl"

    def device_name(self, device_index: int | None = None) -> str:
        return "cuda" if device_index is None else f"cuda:{device_index}"

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def current_device(self) -> int:
        return torch.cuda.current_device()

    def set_device(self, device_index: int) -> None:
        torch.cuda.set_device(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        torch.cuda.synchronize(device_index)

    def manual_seed(self, seed: int) -> None:
        torch.cuda.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.cuda.manual_seed_all(seed)

    def copy_stream(self) -> CudaCopyStream:
        return CudaCopyStream(self.device(self.current_device()))

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def is_bf16_supported(self) -> bool:
        return bool(torch.cuda.is_bf16_supported())  # unannotated in torch

    def is_fp16_supported(self) -> bool:
        return True

    def memory_allocated(self, device_index: int | None = None) -> int:
        return torch.cuda.memory_allocated(device_index)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return torch.cuda.max_memory_allocated(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return torch.cuda.memory_reserved(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return torch.cuda.max_memory_reserved(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        torch.cuda.reset_peak_memory_stats(device_index)

    def total_memory(self, device_index: int | None = None) -> int:
        return torch.cuda.get_device_properties(device_index or 0).total_memory

    def available_memory(self, device_index: int | None = None) -> int:
        free, _total = torch.cuda.mem_get_info(device_index)
        return free

    def memory_stats_source(self) -> str:
        return "CUDA caching allocator"

    def allocator_ruler(self) -> CudaAllocatorRuler:
        return CudaAllocatorRuler(torch.cuda.current_device())
