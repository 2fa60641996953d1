"""Which instant of forward and backward makes the phase's peak, so that lines never held together are
not summed.

The ledger measures a phase's peak at one instant. In forward and backward two instants compete:
- "loss": the loss is computed, or its gradient starts backward. Every layer's activations are held,
  with the loss's fp32 log-softmax (in forward the logits and their fp32 copy, in backward the loss's
  gradients). No module is gathered (stage 3 released the LM head after its forward and gathers it
  again only after the loss's gradient; with memory_efficient_linear off autograd keeps its weight), and
  no parameter gradient exists yet.
- "late": a module runs with its gathered weights (stage 3) and, under full checkpointing or offloaded
  activations, one layer's activations on the GPU; late in backward the parameter gradients and the
  reduce buckets are held while the other activations are mostly freed.
Forward peaks at the loss or at the last module (its activations all but complete), whichever holds
more: the activations held at both plus the larger of the loss's lines and the late ones. Backward
peaks at its start (the activations held there, the loss gradients) or late (the gradients, the
buckets, the gathered working set, a rebuilt layer), whichever holds more. The smaller instant's lines
leave that phase.
Late in backward the gradient partition (stages 2-3) grows bucket by bucket and is whole only at the
end, once no layer is rebuilt any more: the late instant is the larger of "during" (every late line but
the partition) and "end" (the partition with the buckets, their gloo copies and the gathered params).
Checkpointed layer inputs ("held") are freed one by one as backward rebuilds their layers: while it rebuilds
the top layer ("during") every one of them is held beside it, at the end none is.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from zero_plugins import Category

from ._lines import Line

LOSS, LATE, HELD = "loss", "late", "held"
# The gradient partition, whole only at the end of backward, and what is held with it then.
# Held late in backward while a reduced gradient lands, to the very end (step_in_backward's one unit's too).
_AT_THE_END = frozenset({Category.GRAD_PARTITION, Category.GRAD_BUCKET, Category.COMM_STAGING,
                         Category.PARAM_GATHERED})


def _growing(line: Line) -> bool:
    """The gradient partition the step reads, whole only at the end (with step_in_backward one unit's is held
    at a time, during backward: it has no step phase)."""
    return line.category == Category.GRAD_PARTITION and "step" in line.phases


def _at_the_end(line: Line) -> bool:
    return line.category in _AT_THE_END


def at_peak_instants(lines: list[Line]) -> list[Line]:
    """`lines` with each phase's lines from the instant that does not make its peak taken out of it."""
    out = list(lines)
    gpu = [line for line in out if line.location == "gpu"]
    # forward: the loss's transients against the gathered working set (activations are held at both)
    loss = _bytes(gpu, "forward", lambda line: line.instant == LOSS)
    late = _bytes(gpu, "forward", lambda line: line.instant == LATE)
    out = _drop(out, "forward", LATE if loss >= late else LOSS, everything_activations=False)
    # backward: the activations held at its start (every layer's, the loss's gradients) against the
    # gradients, buckets, working set and a rebuilt layer
    held_at_loss = _bytes(gpu, "backward", lambda line: line.instant == LOSS or
                          (line.category == Category.ACTIVATIONS and line.instant != LATE))
    during = _bytes(gpu, "backward", lambda line: (line.instant == LATE and not _growing(line))
                    or line.instant == HELD)
    end = _bytes(gpu, "backward", lambda line: line.instant == LATE and _at_the_end(line))
    if held_at_loss >= max(during, end):
        return _drop(out, "backward", LATE, everything_activations=False)
    out = _drop(out, "backward", LOSS, everything_activations=True)
    if during >= end:
        return _drop_where(out, "backward", lambda line: line.instant == LATE and _growing(line))
    return _drop_where(out, "backward", lambda line: line.instant == HELD or
                       (line.instant == LATE and not _at_the_end(line)))


def _bytes(lines: list[Line], phase: str, chosen: Callable[[Line], bool]) -> int:
    return sum(line.bytes for line in lines if phase in line.phases and chosen(line))


def _drop(lines: list[Line], phase: str, instant: str, everything_activations: bool) -> list[Line]:
    """Take `phase` out of the device lines of `instant` (and of every device activation but the late ones,
    when the late instant of backward makes the peak: by then backward has freed them)."""
    def leaves(line: Line) -> bool:
        freed = everything_activations and line.category == Category.ACTIVATIONS and line.instant not in (LATE, HELD)
        return line.instant == instant or freed

    return _drop_where(lines, phase, leaves)


def _drop_where(lines: list[Line], phase: str, leaves: Callable[[Line], bool]) -> list[Line]:
    """Take `phase` out of the device lines that `leaves`."""
    out = []
    for line in lines:
        if line.location == "gpu" and phase in line.phases and leaves(line):
            line = replace(line, phases=tuple(p for p in line.phases if p != phase))
        if line.phases:
            out.append(line)
    return out
