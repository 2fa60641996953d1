"""Our memory model: every copy, per device and per phase, for one model and one configuration."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from zero_plugins.placement import PlacementPlan

from ._activations import activation_lines
from ._errors import EstimateError
from ._instants import at_peak_instants
from ._lines import LOCATIONS, PHASES, Line
from ._settings import DEFAULT_SEQ_LEN, Cluster, Training, ZeroSettings, placement_plan
from ._spec import ModelSpec
from ._states import state_lines

# The per-phase totals the reports show: per GPU, and per node for host memory ("cpu": pageable and
# pinned), its pinned part ("pinned", the ledger's "host.pinned") and NVMe.
REPORT_DEVICES = ("gpu", "cpu", "pinned", "nvme")
# What `where` may name: a line's location, or one of the report's totals.
_WHERE = {
    "gpu": ("gpu",),
    "host": ("host",),
    "host.pinned": ("host.pinned",),
    "pinned": ("host.pinned",),
    "cpu": ("host", "host.pinned"),
    "nvme": ("nvme",),
}


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU and per node, copy by copy and phase by phase.

    Each line is per GPU's process (per rank), as the engine's ledger counts it. `total`,
    `peak` and `by_category` give the GPU per GPU, and host memory and NVMe per node (the
    node's `gpus_per_node` processes), unless `per_rank=True`. `where` is a location ("gpu",
    "host", "host.pinned", "nvme"), or "cpu" for all host memory and "pinned" for its pinned part.

    Phases: init (after the engine is built; on the host, while the model loads), forward
    (end of forward, activations all held), backward (its start, gradients being made) and
    step (optimizer step).
    """

    model: ModelSpec
    cluster: Cluster
    training: Training
    zero: ZeroSettings
    seq_len: int
    lines: tuple[Line, ...]
    notes: tuple[str, ...]

    def total(self, where: str, phase: str, *, per_rank: bool = False) -> int:
        return sum(self.by_category(where, phase, per_rank=per_rank).values())

    def peak(self, where: str = "gpu", *, per_rank: bool = False) -> tuple[str, int]:
        """The phase where `where` holds the most, and how much (the first such phase on ties)."""
        totals = ((phase, self.total(where, phase, per_rank=per_rank)) for phase in PHASES)
        return max(totals, key=lambda item: item[1])

    def by_category(self, where: str, phase: str, *, per_rank: bool = False) -> dict[str, int]:
        scale = 1 if per_rank or where == "gpu" else self.cluster.gpus_per_node
        totals: dict[str, int] = {}
        for line in self.at(where):
            if phase in line.phases:
                totals[line.category] = totals.get(line.category, 0) + scale * line.bytes
        return totals

    def at(self, where: str) -> list[Line]:
        """The lines at `where` (a location, or "cpu" / "pinned")."""
        if where not in _WHERE:
            raise EstimateError(f"unknown location {where!r}; choose from: {', '.join(_WHERE)}", "where")
        return [line for line in self.lines if line.location in _WHERE[where]]

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.zero.stage,
            "offload_optimizer": self.zero.offload_optimizer,
            "offload_param": self.zero.offload_param,
            "activation_checkpointing": self.training.checkpointing_dict(
                self.model.shape.num_layers if self.model.shape else None
            ),
            "phases": {phase: {d: self.total(d, phase) for d in REPORT_DEVICES} for phase in PHASES},
            "peak": {d: dict(zip(("phase", "bytes"), self.peak(d))) for d in REPORT_DEVICES},
            "lines": [line.as_dict() for line in self.lines],
            "placement": self.plan.as_dict(),
            "notes": list(self.notes),
            "inputs": self._inputs(),
            # Per GPU for "gpu", per node for host memory and NVMe, as by_category gives them.
            "categories": {
                where: {phase: self.by_category(where, phase) for phase in PHASES} for where in LOCATIONS
            },
        }

    @property
    def plan(self) -> PlacementPlan:
        """Where the engine places every copy for these settings (zero_plugins.placement)."""
        return placement_plan(self.zero, self.training, self.cluster)

    def _inputs(self) -> dict[str, object]:
        """The settings the estimate was made with, so JSON output can be checked against the run it predicts."""
        training = self.training
        return {
            "precision": training.precision,
            "optimizer": training.optimizer,
            "optimizer_impl": training.optimizer_impl,
            "micro_batch": training.micro_batch,
            "seq_len": self.seq_len,
            "grad_accum": training.grad_accum,
            "attention": training.attention,
            "world_size": self.cluster.world_size,
            # overlap_comm as used: None (DeepSpeed's default) resolves by stage.
            "zero": {**asdict(self.zero), "overlap_comm": self.zero.overlap},
        }


def estimate(
    model: ModelSpec,
    cluster: Cluster | None = None,
    training: Training | None = None,
    zero: ZeroSettings | None = None,
) -> Estimate:
    """Estimate `model` on `cluster`, trained as `training` describes, with ZeRO settings `zero`."""
    cluster, training, zero = cluster or Cluster(), training or Training(), zero or ZeroSettings()
    lines, notes = state_lines(model, cluster, training, zero)
    seq_len = resolve_seq_len(model, training)
    if model.shape is not None:
        lines += activation_lines(model.shape, training, seq_len)
    else:
        notes.append("activations not estimated: the model's shape is unknown (use --preset or --config)")
    return Estimate(model, cluster, training, zero, seq_len, tuple(at_peak_instants(lines)), tuple(notes))


def resolve_seq_len(model: ModelSpec, training: Training) -> int:
    """The sequence length to use; a model with learned positions cannot run longer sequences."""
    limit = model.shape.max_positions if model.shape else None
    if training.seq_len is None:
        return min(DEFAULT_SEQ_LEN, limit) if limit else DEFAULT_SEQ_LEN
    if limit and training.seq_len > limit:
        raise EstimateError(
            f"{training.seq_len} is longer than the {limit} positions {model.name} has learned; pass {limit} or less",
            "seq_len",
        )
    return training.seq_len
