"""`see_memory_usage`: DeepSpeed's familiar memory line, plus pinned host memory."""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import psutil
import torch.distributed as dist

from ._select import get_accelerator

if TYPE_CHECKING:
    from zero_pin import PinnedMemoryStats

GB = 1024**3


def see_memory_usage(message: str, force: bool = True) -> str | None:
    """Print `message` and the memory figures on rank 0; return the printed text (None elsewhere).

    The lines are DeepSpeed's: MA / Max_MA / CA / Max_CA from the accelerator (on CPU, zero-pin's count of the
    CPU allocator once it runs; before, a storage tracker's figures inside a tracked region, else the process
    RSS), then the
    host's virtual memory, then zero-pin's pinned bytes. As in DeepSpeed, the peaks are reset
    afterwards, so each call's Max_* covers the span since the previous call. Unlike DeepSpeed,
    `force` defaults to True, so a bare call prints; `force=False` prints nothing.
    """
    if not force:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return None
    gc.collect()  # Python frees cycles lazily; collect so the figures show what is really live
    acc = get_accelerator()
    vm = psutil.virtual_memory()
    used_gb = round((vm.total - vm.available) / GB, 2)
    lines = [
        message,
        # The spacing and the unrounded Max_CA follow DeepSpeed's output exactly, for log parsers.
        f"MA {round(acc.memory_allocated() / GB, 2)} GB         "
        f"Max_MA {round(acc.max_memory_allocated() / GB, 2)} GB         "
        f"CA {round(acc.memory_reserved() / GB, 2)} GB         "
        f"Max_CA {round(acc.max_memory_reserved() / GB)} GB ",
        f"CPU Virtual Memory:  used = {used_gb} GB, percent = {vm.percent}%",
        _pinned_line(),
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    acc.reset_peak_memory_stats()
    return text


def pinned_stats() -> PinnedMemoryStats:
    """zero-pin's process-wide pinned bytes: {"total": {"current", "peak"}, "backends": {...}}."""
    import zero_pin

    return zero_pin.pinned_memory_stats()


def _pinned_line() -> str:
    stats = pinned_stats()
    total = stats["total"]
    backends = ", ".join(f"{name} {round(b['current'] / GB, 2)} GB" for name, b in stats["backends"].items())
    return (
        f"Pinned Memory:  current = {round(total['current'] / GB, 2)} GB, peak = {round(total['peak'] / GB, 2)} GB"
        + (f" ({backends})" if backends else "")
    )
