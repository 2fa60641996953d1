"""What makes the GPU peak, and what each lever would make of it: the estimator re-run with one change.

Nothing here is a canned number: every lever's peak is `estimate()` of the same model with that
one setting changed, so `--explain` and the estimator's own lines always agree.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from zero_plugins import Category

from ._estimate import Estimate, estimate
from ._lines import PHASES
from ._settings import Training, ZeroSettings
from ._units import gib


@dataclass(frozen=True)
class Lever:
    """One change to the setup, as words and flags, and the estimate it gives."""

    name: str
    flags: str
    estimate: Estimate | None  # None: not available from this setup (`why` says so)
    why: str = ""

    @property
    def peak(self) -> int | None:
        return None if self.estimate is None else self.estimate.peak("gpu")[1]


@dataclass(frozen=True)
class StageShrink:
    """Stage 0 against stage 3 (no offload): GPU model states (at init) and the GPU peak."""

    states: tuple[int, int]
    peaks: tuple[int, int]

    @property
    def states_ratio(self) -> float:
        return self.states[0] / self.states[1]

    @property
    def peak_ratio(self) -> float:
        return self.peaks[0] / self.peaks[1]


def dominant(e: Estimate) -> tuple[str, int, int]:
    """(category, its bytes, the GPU peak) at the GPU's peak phase: the largest category there."""
    phase, peak = e.peak("gpu")
    categories = e.by_category("gpu", phase)
    category = max(categories, key=lambda name: categories[name])
    return category, categories[category], peak


def stage_shrink(e: Estimate) -> StageShrink:
    """The same model and training at stage 0 and stage 3, neither offloaded."""
    base = replace(e.zero, offload_optimizer="none", offload_param="none")
    zero, three = (estimate(e.model, e.cluster, e.training, replace(base, stage=s)) for s in (0, 3))
    states = (zero.total("gpu", PHASES[0]), three.total("gpu", PHASES[0]))
    return StageShrink(states, (zero.peak("gpu")[1], three.peak("gpu")[1]))


def levers(e: Estimate) -> list[Lever]:
    """Each lever on the GPU peak, applied alone to `e`'s setup."""
    t, z = e.training, e.zero

    def run(training: Training = t, zero: ZeroSettings = z) -> Estimate:
        return estimate(e.model, e.cluster, training, zero)

    out = []
    name, flags = "checkpoint every layer", "--checkpointing full"
    if t.checkpointing == "full" and t.checkpoint_every == 1:
        out.append(Lever(name, flags, None, "already checkpointing every layer"))
    else:
        out.append(Lever(name, flags, run(replace(t, checkpointing="full", checkpoint_every=1))))
    half = t.micro_batch // 2
    name = "halve the micro-batch"
    if half < 1:
        out.append(Lever(name, "--micro-batch", None, "the micro-batch is already 1"))
    else:
        flags = f"--micro-batch {half} --grad-accum {2 * t.grad_accum}"
        out.append(Lever(name, flags, run(replace(t, micro_batch=half, grad_accum=2 * t.grad_accum))))
    name = "next ZeRO stage"
    if z.stage == 3:
        out.append(Lever(name, "--stage", None, "already stage 3"))
    else:
        out.append(Lever(name, f"--stage {z.stage + 1}", run(zero=replace(z, stage=z.stage + 1))))
    name = "offload the optimizer"
    if z.offload_optimizer != "none":
        out.append(Lever(name, "--offload-optimizer", None, f"already offloaded ({z.offload_optimizer})"))
    else:
        stage = max(z.stage, 1)
        flags = ("" if stage == z.stage else f"--stage {stage} ") + "--offload-optimizer cpu"
        out.append(Lever(name, flags, run(zero=replace(z, stage=stage, offload_optimizer="cpu"))))
    name = "checkpointed inputs in host memory"
    if t.cpu_checkpointing:
        out.append(Lever(name, "--cpu-checkpointing", None, "already cpu_checkpointing"))
    else:
        every = t.checkpoint_every if t.checkpointing == "full" else 1
        flags = ("" if t.checkpointing == "full" else "--checkpointing full ") + "--cpu-checkpointing"
        host = replace(t, checkpointing="full", checkpoint_every=every, cpu_checkpointing=True)
        out.append(Lever(name, flags, run(host)))
    name = "the layers' saved activations in host memory"
    if t.offload_activations:
        out.append(Lever(name, "--offload-activations", None, "already offload_activations"))
    elif t.checkpointing == "full":
        out.append(Lever(name, "--offload-activations", None, "full checkpointing saves only the layers' inputs"))
    else:
        out.append(Lever(name, "--offload-activations", run(replace(t, offload_activations=True))))
    return out


def dominates_text(e: Estimate) -> str:
    """--explain's "What dominates the peak" paragraph for one configuration."""
    category, amount, peak = dominant(e)
    phase = e.peak("gpu")[0]
    out = [
        f"What dominates the peak (stage {e.zero.stage}, offload {e.zero.label()}): GPU peak {gib(peak)} GiB "
        f"at {phase}; {category} make {gib(amount)} GiB of it ({_percent(amount, peak)}%)."
    ]
    shrink = stage_shrink(e)
    (s0, s3), (p0, p3) = shrink.states, shrink.peaks
    sentence = (
        f"  From stage 0 to 3, model states fell {shrink.states_ratio:.1f}x ({gib(s0)} -> {gib(s3)} GiB at init), "
        f"the peak {shrink.peak_ratio:.1f}x ({gib(p0)} -> {gib(p3)} GiB)"
    )
    if category == Category.ACTIVATIONS:
        sentence += ": no stage partitions activations"
    out.append(sentence + ".")
    out.append("  Each lever alone (the estimate re-run with that change):")
    for lever in levers(e):
        if lever.estimate is None or lever.peak is None:
            out.append(f"    {lever.name}: not available, {lever.why}")
            continue
        change = lever.peak - peak
        sign = "+" if change >= 0 else "-"
        line = f"    {lever.name} ({lever.flags}): peak {gib(lever.peak)} GiB ({sign}{gib(abs(change))} GiB)"
        if lever.estimate.peak("pinned")[1] > e.peak("pinned")[1]:
            pinned = lever.estimate.peak("pinned")[1] - e.peak("pinned")[1]
            line += f", {gib(pinned)} GiB more pinned host memory per node"
        out.append(line)
    return "\n".join(out)


def _percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0
