"""Our memory model: every copy, per device and per phase, for one model and one configuration."""
from __future__ import annotations

from dataclasses import dataclass

from ._activations import activation_lines
from ._errors import EstimateError
from ._lines import PHASES, Line
from ._settings import DEFAULT_SEQ_LEN, Cluster, Training, ZeroSettings
from ._spec import ModelSpec
from ._states import state_lines

# "pinned" is the part of "cpu" that is page-locked; the ledger reports it as pinned.host.
REPORT_DEVICES = ("gpu", "cpu", "pinned", "nvme")


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU (device "gpu") and per node (cpu, pinned, nvme), copy by copy and phase by phase.

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

    def total(self, device: str, phase: str) -> int:
        return sum(line.bytes for line in self._on(device) if phase in line.phases)

    def peak(self, device: str = "gpu") -> tuple[str, int]:
        """The phase where `device` holds the most, and how much (the first such phase on ties)."""
        return max(((phase, self.total(device, phase)) for phase in PHASES), key=lambda item: item[1])

    def by_category(self, device: str, phase: str) -> dict[str, int]:
        totals: dict[str, int] = {}
        for line in self._on(device):
            if phase in line.phases:
                totals[line.category] = totals.get(line.category, 0) + line.bytes
        return totals

    def _on(self, device: str) -> list[Line]:
        if device == "pinned":
            return [line for line in self.lines if line.pinned]
        return [line for line in self.lines if line.device == device]

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.zero.stage,
            "offload_optimizer": self.zero.offload_optimizer,
            "offload_param": self.zero.offload_param,
            "phases": {phase: {d: self.total(d, phase) for d in REPORT_DEVICES} for phase in PHASES},
            "peak": {d: dict(zip(("phase", "bytes"), self.peak(d))) for d in REPORT_DEVICES},
            "lines": [line.as_dict() for line in self.lines],
            "notes": list(self.notes),
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
    return Estimate(model, cluster, training, zero, seq_len, tuple(lines), tuple(notes))


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
