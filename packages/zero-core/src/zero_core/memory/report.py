"""What `engine.memory_report()` returns: a dict per location, printable as a plain table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zero_plugins import format_table

if TYPE_CHECKING:
    from zero_pin._accounting import PinnedMemoryStats  # zero_pin does not re-export it

MiB = 1024 * 1024


@dataclass
class CommCount:
    calls: int = 0
    payload_bytes: int = 0
    sent_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "payload_bytes": self.payload_bytes, "sent_bytes": self.sent_bytes}


class MemoryReport(dict[str, dict[str, dict[str, int]]]):
    """`{location: {category: {"current": bytes, "peak": bytes}, ..., "total": {...}}}`.

    A location is the device type ("cpu", "cuda") for device memory, or "host",
    "host.pinned", "nvme" for offloaded copies.

    `.comm` holds the collectives (`{op: {"calls", "payload_bytes", "sent_bytes"}}`) and
    `.pinned` zero-pin's process-wide pinned host memory, when known. `str()` is a table.
    """

    def __init__(
        self,
        memory: dict[str, dict[str, dict[str, int]]],
        comm: dict[str, dict[str, int]],
        pinned: PinnedMemoryStats | None = None,
        tracked: bool = False,
    ) -> None:
        super().__init__(memory)
        self.comm = comm
        self.pinned = pinned
        self.tracked = tracked

    def as_dict(self) -> dict[str, Any]:
        return {"memory": dict(self), "comm": self.comm, "pinned": self.pinned, "tracked": self.tracked}

    def __str__(self) -> str:
        rows = [
            (where, category, _size(figures["current"]), _size(figures["peak"]))
            for where, categories in self.items()
            for category, figures in categories.items()
        ]
        note = "" if self.tracked else " (engine-owned buffers only: tracking is off, so activations are not counted)"
        parts = [f"memory ledger{note}", format_table(["location", "category", "current", "peak"], rows)]
        if self.pinned is not None:
            total = self.pinned["total"]
            parts.append(f"pinned host memory (process-wide): {_size(total['current'])} now, peak {_size(total['peak'])}")
        if self.comm:
            comm_rows = [
                (op, c["calls"], _size(c["payload_bytes"]), _size(c["sent_bytes"])) for op, c in self.comm.items()
            ]
            parts.append("collectives (sent: bytes this rank sends, ring algorithm)")
            parts.append(format_table(["op", "calls", "payload", "sent"], comm_rows))
        return "\n".join(parts)


def _size(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / MiB:.2f} MiB)"
