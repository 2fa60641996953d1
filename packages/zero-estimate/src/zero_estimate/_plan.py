"""`zero plan`: which ZeRO configurations fit the hardware, cheapest first, and how far the rest miss."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from zero_plugins import Category

from . import _checks
from ._estimate import Estimate, estimate
from ._settings import Cluster, Training, ZeroSettings
from ._spec import ModelSpec

# (offload_optimizer, offload_param, stages), cheapest first: offload costs more than
# communication, so every stage without offload comes before any with it. Within a rung,
# stages 0-2 move 2P per step and stage 3 moves 3P (ZeRO paper).
LADDER = (
    ("none", "none", (0, 1, 2, 3)),
    ("cpu", "none", (2, 3)),
    ("cpu", "cpu", (3,)),
    ("nvme", "none", (2, 3)),
    ("nvme", "cpu", (3,)),
    ("nvme", "nvme", (3,)),
)


@dataclass(frozen=True)
class Limits:
    """Bytes available: per GPU, and per node for host memory and NVMe (None: not checked / no NVMe)."""

    gpu_memory: int
    cpu_memory: int | None = None
    nvme: int | None = None

    def __post_init__(self) -> None:
        _checks.count(self.gpu_memory, "gpu_memory")
        for name in ("cpu_memory", "nvme"):
            if getattr(self, name) is not None:
                _checks.count(getattr(self, name), name)

    def capacity(self, device: str) -> int | None:
        return {"gpu": self.gpu_memory, "cpu": self.cpu_memory, "nvme": self.nvme}[device]


@dataclass(frozen=True)
class Candidate:
    estimate: Estimate
    over: dict[str, int]  # device -> bytes over its limit; empty when it fits

    @property
    def fits(self) -> bool:
        return not self.over

    def shortfall(self, limits: Limits) -> float:
        """The worst overshoot as a fraction of its limit, to rank near misses."""
        return max(over / (limits.capacity(device) or 1) for device, over in self.over.items())

    def ds_config(self) -> dict[str, object]:
        """The `zero_optimization` block of this candidate."""
        zero = self.estimate.zero
        block: dict[str, object] = {"stage": zero.stage}
        for key in ("offload_optimizer", "offload_param"):
            if getattr(zero, key) != "none":
                block[key] = {"device": getattr(zero, key)}
        return block

    def as_dict(self) -> dict[str, object]:
        e = self.estimate
        layers = e.model.shape.num_layers if e.model.shape else None
        return {
            "zero_optimization": self.ds_config(),
            "activation_checkpointing": e.training.checkpointing_dict(layers),
            "gpu_peak": dict(zip(("phase", "bytes"), e.peak("gpu"))),
            "cpu_peak_per_node": e.peak("cpu")[1],
            "pinned_peak_per_node": e.peak("pinned")[1],
            "nvme_per_node": e.peak("nvme")[1],
            "over": self.over,
        }


@dataclass(frozen=True)
class Plan:
    limits: Limits
    fits: list[Candidate]
    misses: list[Candidate]  # nearest first

    def as_dict(self) -> dict[str, object]:
        return {
            "limits": asdict(self.limits),
            "fits": [c.as_dict() for c in self.fits],
            "misses": [c.as_dict() for c in self.misses],
        }


def plan(
    model: ModelSpec,
    cluster: Cluster,
    limits: Limits,
    training: Training | None = None,
    base: ZeroSettings | None = None,
) -> Plan:
    """Try every stage and offload combination (NVMe only when `limits.nvme` is given).

    When a configuration misses the GPU by no more than its activations and `training` does not
    checkpoint fully, the same ladder is tried again checkpointing every layer; those candidates
    come after every one without it (recomputation costs one more forward per step).

    `base` supplies the bucket sizes and other settings; its stage and offload are replaced.
    """
    base, training = base or ZeroSettings(), training or Training()
    candidates = _ladder(model, cluster, limits, training, base)
    if _activations_miss(candidates) and training.checkpointing != "full" and model.shape is not None:
        # Checkpointing as a lever: the whole ladder again, checkpointing every layer (one more forward).
        checkpointed = replace(training, checkpointing="full", checkpoint_every=1)
        candidates += _ladder(model, cluster, limits, checkpointed, base)
    fits = [c for c in candidates if c.fits]
    misses = sorted((c for c in candidates if not c.fits), key=lambda c: c.shortfall(limits))
    return Plan(limits, fits, misses)


def _ladder(
    model: ModelSpec, cluster: Cluster, limits: Limits, training: Training, base: ZeroSettings
) -> list[Candidate]:
    candidates = []
    for optimizer_device, param_device, stages in LADDER:
        if "nvme" in (optimizer_device, param_device) and limits.nvme is None:
            continue
        for stage in stages:
            zero = replace(base, stage=stage, offload_optimizer=optimizer_device, offload_param=param_device)
            result = estimate(model, cluster, training, zero)
            candidates.append(Candidate(result, _over(result, limits)))
    return candidates


def _activations_miss(candidates: list[Candidate]) -> bool:
    """Some configuration misses the GPU by no more than its activations: only they can close the gap."""
    for c in candidates:
        over = c.over.get("gpu")
        if over is not None:
            activations = c.estimate.by_category("gpu", c.estimate.peak("gpu")[0]).get(Category.ACTIVATIONS, 0)
            if activations >= over:
                return True
    return False


def _over(result: Estimate, limits: Limits) -> dict[str, int]:
    over = {}
    for device in ("gpu", "cpu", "nvme"):
        limit, need = limits.capacity(device), result.peak(device)[1]
        if limit is not None and need > limit:
            over[device] = need - limit
    return over
