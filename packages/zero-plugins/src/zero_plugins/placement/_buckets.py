"""How many elements stage 3 packs into one gradient reduce bucket: the engine packs, the estimator predicts."""
from __future__ import annotations

# Below about this many elements (2 MiB of bf16) a gloo collective on CPU costs its per-call latency (about half a
# millisecond, and a scheduling delay on a loaded host), not its bytes.
LATENCY_BOUND_NUMEL = 1 << 20


def stage3_bucket_cap(largest_unit: int, reduce_bucket_size: int) -> int:
    """The most elements of consecutive units one stage-3 reduce bucket holds.

    At most `reduce_bucket_size`, as DeepSpeed bounds its bucket; and no more than the largest unit alone needs,
    so that a large model's reduce buffers (`grad.bucket`) stay what the units need. Units smaller than
    LATENCY_BOUND_NUMEL pack up to it, so that a small model's step is not one collective per unit, each a point
    where the ranks wait for one another (issue 34: 15 reduce-scatters per step where DeepSpeed has 1).
    """
    return min(reduce_bucket_size, max(largest_unit, LATENCY_BOUND_NUMEL))
