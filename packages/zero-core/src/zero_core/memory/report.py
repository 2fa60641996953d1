"""What `engine.memory_report()` returns: a dict per location, printable as a plain table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zero_plugins import Category, format_table

from .levers import LeverSetup, measured_levers

if TYPE_CHECKING:
    from zero_pin import PinnedMemoryStats

    from .ruler import AllocatorFigures

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
    `.pinned` zero-pin's process-wide pinned host memory, when known; `.pinning` the pinned buffers requested
    in each optimizer step (zero_pin.PinActivity's fields; 0 after the first step when buffers are reused).
    `str()` is a table.
    """

    def __init__(
        self,
        memory: dict[str, dict[str, dict[str, int]]],
        comm: dict[str, dict[str, int]],
        pinned: PinnedMemoryStats | None = None,
        tracked: bool = False,
        at_peak: dict[str, dict[str, int]] | None = None,
        setup: LeverSetup | None = None,
        allocator: AllocatorFigures | None = None,
        pinning: list[dict[str, int]] | None = None,
    ) -> None:
        super().__init__(memory)
        self.comm = comm
        self.pinned = pinned
        self.tracked = tracked
        self.at_peak = at_peak or {}  # {location: {category: bytes held when the location's total peaked}}
        self.setup = setup  # the engine's stage and world: what the levers are computed from
        self.allocator = allocator  # the allocator beside the ledger (memory/ruler.py), when one counts
        self.pinning = pinning or []  # per optimizer step: pinned buffers requested (allocations, copies, bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"memory": dict(self), "comm": self.comm, "pinned": self.pinned, "tracked": self.tracked,
                "at_peak": self.at_peak, "allocator": self.allocator, "pinning": self.pinning}

    def what_made_the_peak(self, location: str) -> str:
        """In words: which categories held a location's memory when its total peaked, and the levers on the largest."""
        held = self.at_peak.get(location, {})
        total = sum(held.values())
        if total == 0:
            return f"{location}: nothing held"
        ranked = sorted(held.items(), key=lambda item: -item[1])
        shares = ", ".join(f"{category} {value / total:.0%} ({value / MiB:.2f} MiB)" for category, value in ranked[:3])
        largest = ranked[0][0]
        lever = _LEVERS.get(largest.split(".")[0], "")
        text = (f"{location} peaked at {total / MiB:.2f} MiB: {shares}; {largest} made most of it"
                + (f" ({lever})" if lever else ""))
        if self.setup is None:
            return text + "; `zero estimate --explain` computes what each lever saves"
        computed = [f"{lever.name}: -{lever.saves / MiB:.2f} MiB (peak {(total - lever.saves) / MiB:.2f} MiB)"
                    for lever in measured_levers(held, self.setup)]
        if computed:
            text += "; each lever alone, from the lines held at this peak: " + ", ".join(computed)
        return text + "; what checkpointing would save: `zero estimate --explain`"

    def __str__(self) -> str:
        rows = [
            (where, category, _size(figures["current"]), _size(figures["peak"]))
            for where, categories in self.items()
            for category, figures in categories.items()
        ]
        note = "" if self.tracked else " (engine-owned buffers only: tracking is off, so activations are not counted)"
        parts = [f"memory ledger{note}", format_table(["location", "category", "current", "peak"], rows)]
        parts.extend(f"what made the peak: {self.what_made_the_peak(where)}" for where in self.at_peak)
        parts.extend(_allocator_lines(self.allocator))
        if self.pinned is not None:
            total = self.pinned["total"]
            parts.append(f"pinned host memory (process-wide): {_size(total['current'])} now, peak {_size(total['peak'])}")
        if self.pinning:
            parts.append(_pinning_line(self.pinning))
        if self.comm:
            comm_rows = [
                (op, c["calls"], _size(c["payload_bytes"]), _size(c["sent_bytes"])) for op, c in self.comm.items()
            ]
            parts.append("collectives (sent: bytes this rank sends, ring algorithm)")
            parts.append(format_table(["op", "calls", "payload", "sent"], comm_rows))
        return "\n".join(parts)


# What lowers each kind of memory, by the category's first word (docs/ledger.md).
_LEVERS = {
    Category.ACTIVATIONS: "activation checkpointing (docs/activations.md) or a smaller micro-batch lowers it; no ZeRO stage does",
    "optim": "a higher ZeRO stage shards it, offload_optimizer moves it off the device",
    "grad": "stage 2 or 3 keeps only this rank's gradient partition",
    "param": "stage 3 partitions the weights, offload_param moves the partitions off the device",
    Category.OTHER: "step temporaries: torch's optimizers make parameter-sized ones; CPU offload's sub_group_size bounds them",
}


def _allocator_lines(figures: AllocatorFigures | None) -> list[str]:
    """The ruler beside the ledger: now, and per phase measured while tracking."""
    if figures is None:
        return ["allocator: not counted (on CPU, zero_pin.count_host_allocations() or engine.track_memory() "
                "starts the count; docs/ledger.md)"]
    lines = [f"allocator ({figures['ruler']}, the ruler): {_size(figures['current'])} now, of which the ledger "
             f"explains {_size(figures['ledger'])}; untracked {_size(figures['untracked'])}"]
    rows = [(phase, _size(p["allocator"]), _size(p["ledger"]), _size(p["untracked"]), _share(p["untracked"], p["allocator"]))
            for phase, p in figures["phases"].items()]
    if rows:
        lines.append(format_table(["phase", "allocator peak", "ledger peak", "untracked", "of allocator"], rows))
    return lines


def _pinning_line(steps: list[dict[str, int]]) -> str:
    first, later = steps[0], steps[1:]
    text = (f"pinned buffers requested per optimizer step: step 1 {first['allocations']} "
            f"({_size(first['allocated_bytes'])}), {first['copies']} copies")
    if later:
        allocations = sum(step["allocations"] for step in later)
        copies = sum(step["copies"] for step in later)
        text += f"; steps 2-{len(steps)} {allocations} in all, {copies} copies"
    return text


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _size(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / MiB:.2f} MiB)"
