"""This rank's shards, laid out as the engine lays them out: what each offloaded copy is made of.

The engine (zero-core) keeps the trainable params in flat buffers, pads each buffer to a
multiple of the N ranks, and gives every rank one shard of each (docs/memory-model.md):
- stages 1-2: reduce buckets of at most `reduce_bucket_size` elements, cut in reverse
  registration order (a larger param gets a bucket of its own);
- stage 3: one unit per module instance (its own params above
  `stage3_param_persistence_threshold`; its frozen ones form a unit of their own), and the
  small trainable params in buckets, as at stage 2.
Each trainable shard is one fp32 master tensor, one fp32 gradient partition (a buffer of its
own, pinned in whole pages when offloaded), and one optimizer step count. Each stage-3 unit
shard, trainable or frozen, is one 16-bit param partition.

A module list (a live nn.Module, a Hugging Face config) gives the layout exactly. Bare counts
give it only in one case, a single bucket at stages 1-2; otherwise `Shards.exact` is False and
the shards are taken as one buffer of ceil(X/N) elements, a lower bound: each further buffer
adds under N elements of padding, a page at most when pinned, and a step count.

With NVMe (zero-offload's `nvme` device) the same shards go to swap files: each master shard cut
into sub-groups of at most `buffer_numel` elements, a file per sub-group and per state tensor;
each 16-bit unit shard past `max_in_cpu` one file. Files and the buffers they are read into are
laid out in whole 4 KiB blocks (O_DIRECT), so each counts `blocks(bytes)`.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from zero_plugins.placement import stage3_bucket_cap

from ._formula import SUM_PRECEDENCE, Q
from ._settings import ZeroSettings
from ._spec import ModelSpec

# How many distinct shard sizes --explain writes out before it abbreviates.
_SHOWN_SIZES = 4
# zero-offload's swap alignment (swap._buffers.ALIGNMENT): O_DIRECT moves whole blocks, so every swap
# file and every swap buffer takes a multiple of it, whatever the host's page size.
SWAP_BLOCK = 4096


def pages(nbytes: int, page: int) -> int:
    """Bytes that pinning `nbytes` locks: whole pages, at least one (mlock locks pages)."""
    return max(page, -(-nbytes // page) * page)


def blocks(nbytes: int) -> int:
    """Bytes that `nbytes` take in a swap file or a swap buffer: whole O_DIRECT blocks (none for 0 bytes)."""
    return -(-nbytes // SWAP_BLOCK) * SWAP_BLOCK


def blocks_q(q: Q) -> Q:
    """`blocks()` of a quantity, keeping its formula."""
    return Q(blocks(q.value), f"blocks({q.symbols})", f"blocks({q.numbers})")


def shard_numel(numel: int, world_size: int) -> int:
    """Elements of each rank's shard of a flat buffer of `numel`: padded to N equal shards, at least one each."""
    return max(-(-numel // world_size), 1)


def split_into_buckets(numels: Iterable[int], max_numel: int) -> list[int]:
    """zero-core's cut: consecutive params, at most `max_numel` elements a bucket, a larger param alone."""
    buckets: list[int] = []
    size, open_bucket = 0, False
    for numel in numels:
        if open_bucket and size + numel > max_numel:
            buckets.append(size)
            size, open_bucket = 0, False
        size += numel
        open_bucket = True
    if open_bucket:
        buckets.append(size)
    return buckets


@dataclass(frozen=True)
class Shards:
    """This rank's shards of one kind: `sizes` as (elements, how many shards of that size), largest first.

    `total` is their elements with its formula; `exact` False when they are a lower bound (bare counts).
    """

    sizes: tuple[tuple[int, int], ...]
    total: Q
    exact: bool
    order: tuple[int, ...] = ()  # the shards as laid out (the optimizer steps them in this order)

    @classmethod
    def laid_out(cls, shards: list[int], symbol: str) -> Shards:
        counts = Counter(shards)
        return cls(tuple(sorted(counts.items(), reverse=True)), Q.var(symbol, sum(shards)), exact=True,
                   order=tuple(shards))

    @classmethod
    def one(cls, total: Q, exact: bool) -> Shards:
        """A single shard of `total` elements (none when it is 0)."""
        return cls(((total.value, 1),) if total.value else (), total, exact)

    @property
    def count(self) -> int:
        return sum(n for _, n in self.sizes)

    def paged(self, per_element: int, page: int, each: str) -> Q:
        """Bytes of the shards as pinned buffers of `per_element` bytes an element, each rounded up to pages."""
        return self._rounded(per_element, "pages", lambda nbytes: pages(nbytes, page), each)

    def blocked(self, per_element: int, each: str) -> Q:
        """Bytes of the shards as swap files of `per_element` bytes an element, each in whole blocks."""
        return self._rounded(per_element, "blocks", blocks, each)

    def cut(self, max_numel: int, symbol: str) -> Shards:
        """Each shard cut into consecutive pieces of at most `max_numel` elements (the engine's sub-groups)."""
        if all(size <= max_numel for size, _ in self.sizes):
            return self  # nothing to cut: keep the shards' own formula
        counts: Counter[int] = Counter()
        for size, n in self.sizes:
            whole, rest = divmod(size, max_numel)
            counts[max_numel] += whole * n
            if rest:
                counts[rest] += n
        return Shards(tuple(sorted(counts.items(), reverse=True)), Q.var(symbol, self.total.value), self.exact)

    def _rounded(self, per_element: int, name: str, rounding: Callable[[int], int], each: str) -> Q:
        value = sum(n * rounding(per_element * size) for size, n in self.sizes)
        if self.count <= 1:
            symbols, numbers = self.total.symbols, self.total.numbers
            return Q(value, f"{name}({per_element} * {symbols})", f"{name}({per_element} * {numbers})")
        terms = [f"{n:,} x {name}({per_element} * {size:,})" for size, n in self.sizes[:_SHOWN_SIZES]]
        if len(self.sizes) > _SHOWN_SIZES:
            rest = self.sizes[_SHOWN_SIZES:]
            terms.append(f"{sum(n for _, n in rest):,} more of {len(rest):,} other sizes")
        # precedence of a sum: `2 * (...)` when the optimizer keeps two files per sub-group
        return Q(value, f"sum {name}({per_element} * {each})", " + ".join(terms), SUM_PRECEDENCE)


def optimizer_shards(spec: ModelSpec, zero: ZeroSettings, world_size: int, T: Q, N: Q) -> Shards:
    """The shards of the trainable params this rank steps: one per master tensor (stages 1-3)."""
    if not spec.modules:
        if spec.trainable_params == 0:
            return Shards.one(Q.var("S", 0), exact=True)
        one_bucket = zero.stage < 3 and spec.trainable_params <= zero.reduce_bucket_size
        return Shards.one(T.per(N), exact=one_bucket)
    if zero.stage < 3:
        trainable = [math.prod(shape) for m in spec.instances() for shape in m.trainable]
        buckets = split_into_buckets(reversed(trainable), zero.reduce_bucket_size)
        return Shards.laid_out([shard_numel(b, world_size) for b in buckets], "S")
    threshold = zero.stage3_param_persistence_threshold
    small: list[int] = []  # kept whole on every rank, stepped in stage-2 buckets
    units: list[int] = []
    for m in spec.instances():
        numels = [math.prod(shape) for shape in m.trainable]
        small += [n for n in numels if n <= threshold]
        unit = sum(n for n in numels if n > threshold)  # params above the threshold have an element at least
        if unit:
            units.append(unit)
    buckets = split_into_buckets(reversed(small), zero.reduce_bucket_size)
    return Shards.laid_out([shard_numel(n, world_size) for n in buckets + units], "S")


def master_tensor_numels(spec: ModelSpec, zero: ZeroSettings, world_size: int) -> list[int] | None:
    """This rank's fp32 master tensors in the order the optimizer steps them (None from bare counts):
    one per reduce bucket (whole at stage 0, this rank's shard from stage 1), and at stage 3 one per unit."""
    if not spec.modules:
        return None
    if zero.stage == 0:
        trainable = [math.prod(shape) for m in spec.instances() for shape in m.trainable]
        return split_into_buckets(reversed(trainable), zero.reduce_bucket_size)
    shards = optimizer_shards(spec, zero, world_size, Q.var("T", spec.trainable_params), Q.var("N", world_size))
    return list(shards.order)


def param_shards(spec: ModelSpec, zero: ZeroSettings, world_size: int, partitioned: Q, N: Q) -> Shards:
    """Stage 3's 16-bit param partitions: one shard per unit, trainable or frozen.

    `partitioned` is the formula of the params above the persistence threshold, for bare counts.
    """
    if not spec.modules:
        return Shards.one(partitioned.per(N), exact=False)
    return Shards.laid_out(unit_shards(spec, zero, world_size), "U")


def unit_shards(spec: ModelSpec, zero: ZeroSettings, world_size: int) -> list[int]:
    """This rank's shard of each stage-3 unit, in the order the engine builds them (module order).

    Within a module the trainable unit is taken first, then the frozen one (the engine takes the
    group of the module's first large param first; a module mixing both is rare).
    """
    threshold = zero.stage3_param_persistence_threshold
    units: list[int] = []
    for m in spec.instances():
        for shapes in (m.trainable, m.frozen):
            numels = [math.prod(shape) for shape in shapes if math.prod(shape) > threshold]
            if numels:
                units.append(sum(numels))
    return [shard_numel(n, world_size) for n in units]


def split_at_max_in_cpu(shards: list[int], max_in_cpu: int) -> tuple[list[int], list[int]]:
    """(kept in host memory, in swap files): `offload_param.max_in_cpu` with NVMe.

    The engine keeps unit shards in host memory, in build order, while their running sum stays
    within max_in_cpu elements; from the first that would pass it on, every unit goes to a file
    (a later, smaller one too, as in DeepSpeed: the split is one point in module order).
    """
    kept = 0
    for index, numel in enumerate(shards):
        if kept + numel > max_in_cpu:
            return shards[:index], shards[index:]
        kept += numel
    return shards, []


def param_shards_by_home(
    spec: ModelSpec, zero: ZeroSettings, world_size: int, partitioned: Q, N: Q
) -> tuple[Shards, Shards]:
    """Stage 3's 16-bit param partitions with `offload_param.device: nvme`: (in host memory, in swap files)."""
    if not spec.modules:
        one = partitioned.per(N)
        none = Shards.one(Q.const(0), exact=False)
        if one.value <= zero.param_max_in_cpu:
            return Shards.one(one, exact=False), none
        return none, Shards.one(one, exact=False)
    kept, swapped = split_at_max_in_cpu(unit_shards(spec, zero, world_size), zero.param_max_in_cpu)
    return Shards.laid_out(kept, "Uc"), Shards.laid_out(swapped, "Un")


def largest_bucket(spec: ModelSpec, zero: ZeroSettings) -> int | None:
    """Elements of the largest gradient bucket the engine reduces through one transient buffer (stages 2-3);
    None without the modules. At stage 3 a unit's gradient is one bucket of its own, and the engine packs
    consecutive buckets (in gradient order) into one collective up to stage3_bucket_cap."""
    if not spec.modules:
        return None
    threshold = zero.stage3_param_persistence_threshold
    numels, units = [], []
    for m in spec.instances():
        sizes = [math.prod(shape) for shape in m.trainable]
        if zero.stage == 3:
            units.append(sum(n for n in sizes if n > threshold))
            sizes = [n for n in sizes if n <= threshold] + ([units[-1]] if units[-1] else [])
        numels += sizes
    cap = stage3_bucket_cap(max(units), zero.reduce_bucket_size) if units else zero.reduce_bucket_size
    return max(split_into_buckets(reversed(numels), cap), default=0)
