"""One copy of something in memory: what it is, where it lives, its formula, and when it is live."""
from __future__ import annotations

from dataclasses import dataclass

from ._formula import Q

PHASES = ("init", "forward", "backward", "step")
ALWAYS = PHASES
INIT = ("init",)
FORWARD_BACKWARD = ("forward", "backward")
BACKWARD = ("backward",)
BACKWARD_STEP = ("backward", "step")
STEP = ("step",)

# The engine ledger's categories (DESIGN.md, "Memory ledger", and docs/architecture.md), so estimate and
# ledger compare line by line. At stages 0-2 whole 16-bit params are `param.persistent`, as in the ledger.
CATEGORIES = (
    "param.partition",
    "param.gathered",
    "param.persistent",
    "module.buffers",
    "grad.full",
    "grad.partition",
    "grad.bucket",
    "optim.master",
    "optim.state",
    "optim.grad",
    "swap.buffer",
    "comm",
    "activations",
    "other",
)
# gpu lines are per GPU; host lines (cpu, nvme) are per node, summed over its GPUs' processes.
DEVICES = ("gpu", "cpu", "nvme")


@dataclass(frozen=True)
class Line:
    category: str
    device: str
    what: str
    formula: str
    numbers: str
    bytes: int
    phases: tuple[str, ...]
    pinned: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "device": self.device,
            "what": self.what,
            "formula": self.formula,
            "numbers": self.numbers,
            "bytes": self.bytes,
            "phases": list(self.phases),
            "pinned": self.pinned,
        }


class Lines(list[Line]):
    """Collects lines, dropping copies of zero bytes (an SGD state, a model with nothing frozen)."""

    def add(
        self, category: str, device: str, what: str, q: Q, phases: tuple[str, ...], *, pinned: bool = False
    ) -> None:
        assert category in CATEGORIES and device in DEVICES, (category, device)
        if q.value > 0:
            self.append(Line(category, device, what, q.symbols, q.numbers, q.value, phases, pinned))
