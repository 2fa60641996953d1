"""One copy of something in memory: what it is, where it lives, its formula, and when it is live."""
from __future__ import annotations

from dataclasses import dataclass

from zero_plugins import Category
from zero_plugins.placement import Location

from ._formula import Q

PHASES = ("init", "forward", "backward", "step")
ALWAYS = PHASES
INIT = ("init",)
FORWARD_BACKWARD = ("forward", "backward")
BACKWARD = ("backward",)
BACKWARD_STEP = ("backward", "step")
STEP = ("step",)
FORWARD = ("forward",)
AFTER_INIT = ("forward", "backward", "step")  # made by the first step (the optimizer's state)
BUILD = "build"  # the instant of lines that exist only while the model is built (Line.instant)

# The categories are the engine ledger's (zero_plugins.Category), so estimate and ledger compare line by
# line. At stages 0-2 whole 16-bit params are `param.persistent`, as in the ledger. The engine all-gathers
# in place; only gloo stages a copy of a collective's buffer (`comm.staging`, on the CPU accelerator).
# Where a copy lives: "gpu" is the accelerator's memory (the ledger's device-type location, "cuda",
# or "cpu" on the CPU accelerator); the others are the placement plan's location names, which the
# ledger uses too: "host" for pageable host memory, "host.pinned" for page-locked host memory, "nvme"
# for swap files.
LOCATIONS = ("gpu", *(str(where) for where in (Location.HOST, Location.HOST_PINNED, Location.NVME)))
# The older device names, still accepted by Estimate.total() and friends: "cpu" is all host memory,
# pinned or not, and "pinned" its page-locked part.
DEVICES = ("gpu", "cpu", "nvme")


@dataclass(frozen=True)
class Line:
    """One copy. `bytes` is per GPU's process (per rank), as the engine's ledger counts it, on every
    location; a node's host and NVMe hold `gpus_per_node` times that (Estimate.total)."""

    category: Category
    location: str
    what: str
    formula: str
    numbers: str
    bytes: int
    phases: tuple[str, ...]
    # Which instant of its phase holds it, where a phase's peak falls at one of two instants (_instants.py):
    # "loss" (the loss and its gradient, all activations held) or "late" (gradients, buckets and gathered
    # params, made while the layers run); "build" for what exists only while the model is built, before
    # initialize returns (zero profile's init, measured after initialize, leaves it out). "" when the line
    # is held throughout its phases.
    instant: str = ""

    @property
    def pinned(self) -> bool:
        return self.location == "host.pinned"

    @property
    def on_host(self) -> bool:
        """Host memory or NVMe: summed per node, over its GPUs' processes."""
        return self.location != "gpu"

    @property
    def device(self) -> str:
        """The location in the older device names: gpu, cpu (host memory, pinned or not) or nvme."""
        return "cpu" if self.location.startswith("host") else self.location

    def as_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "location": self.location,
            "pinned": self.pinned,
            "what": self.what,
            "formula": self.formula,
            "numbers": self.numbers,
            "bytes": self.bytes,
            "phases": list(self.phases),
            "instant": self.instant,
        }


class Lines(list[Line]):
    """Collects lines, dropping copies of zero bytes (an SGD state, a model with nothing frozen)."""

    def add(self, category: Category, location: str, what: str, q: Q, phases: tuple[str, ...], instant: str = "") -> None:
        assert location in LOCATIONS, (category, location)
        if q.value > 0:
            self.append(Line(category, location, what, q.symbols, q.numbers, q.value, phases, instant))
