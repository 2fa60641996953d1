"""Model states, copy by copy: params, gradients, optimizer, buckets, host and NVMe buffers.

Each line is per GPU's process (per rank), at a location ("gpu", or the ledger's "host",
"host.pinned", "nvme"), with the phases in which it is live. Offloaded copies are laid out
as the engine lays them out (_partitions.py), so they equal its ledger byte for byte where
the model's modules are known. The stage contracts are DESIGN.md's:
    stage 0: whole params, grads and optimizer on every GPU
    stage 1: optimizer partitioned (1/N each)
    stage 2: + gradients partitioned (reduce-scattered in buckets during backward)
    stage 3: + params partitioned, gathered module by module for forward and backward
"""
from __future__ import annotations

import math

from zero_plugins import Category, budget_slice_numel
from zero_plugins.placement import DTYPE_BYTES, Copy, Location, PlacedCopy, StepGranularity

from ._errors import EstimateError
from ._formula import Q, largest, smallest
from ._held import block_linear_weights, held_linear_weights, held_outside_checkpoints
from ._lines import AFTER_INIT, ALWAYS, BACKWARD, BUILD, BACKWARD_STEP, FORWARD, FORWARD_BACKWARD, INIT, STEP, Lines
from ._optimizer_step import step_temporaries
from ._partitions import (
    SWAP_BLOCK,
    Shards,
    blocks_q,
    largest_bucket,
    master_tensor_numels,
    optimizer_shards,
    pages,
    param_shards,
    param_shards_by_home,
)
from ._settings import STATE_TENSORS, Cluster, Training, ZeroSettings, placement_plan
from ._spec import ModelSpec

# Bytes per trainable param of each optimizer's fp32 state (Adafactor's depends on shapes).
STATE_BYTES = {"adamw": 8, "adam": 8, "sgd-momentum": 4, "sgd": 0}
_STATE_NAMES = {"adamw": "Adam m and v", "adam": "Adam m and v", "sgd-momentum": "SGD momentum", "sgd": "SGD: none"}
# With the optimizer on NVMe, each state tensor (STATE_TENSORS) is a swap file per swap slice; whether the
# optimizer keeps a 4-byte step count per tensor (which stays in host memory).
_STEP_COUNTS = {"adamw": True, "adam": True, "sgd-momentum": False, "sgd": False, "adafactor": True}


class _Context:
    """The quantities every formula refers to, named as the docs name them."""

    def placed(self, copy: Copy) -> PlacedCopy:
        """Where the plan keeps `copy` (every line below takes its location from here, not from the settings)."""
        placed = self.plan.get(copy)
        assert placed is not None, f"the placement plan keeps no {copy}"
        return placed

    def __init__(self, spec: ModelSpec, cluster: Cluster, training: Training, zero: ZeroSettings) -> None:
        self.spec, self.training, self.zero = spec, training, zero
        self.P = Q.var("P", spec.total_params)
        self.T = Q.var("T", spec.trainable_params)
        self.N = Q.var("N", cluster.world_size)
        self.world_size = cluster.world_size
        self.page = cluster.page_size
        self.b = Q.const(training.param_bytes)
        self.word = "16-bit" if training.mixed else "fp32"
        # The optimizer's share of the trainable params on this GPU: all of it at stage 0.
        self.T_part = self.T if zero.stage == 0 else self.T.per(self.N)
        self.plan = placement_plan(zero, training, cluster)
        self.notes: list[str] = []


def state_lines(spec: ModelSpec, cluster: Cluster, training: Training, zero: ZeroSettings) -> tuple[Lines, list[str]]:
    """Every model-state copy of `spec` trained with these settings, and notes on what was assumed."""
    c = _Context(spec, cluster, training, zero)
    lines = Lines()
    if zero.stage < 3:
        lines.add(Category.PARAM_PERSISTENT, "gpu", f"{c.word} params, whole model on every GPU", c.b * c.P, ALWAYS)
    else:
        _stage3_params(c, lines)
    _gradients(c, lines)
    if training.staged_collectives:
        _staging(c, lines)
    _optimizer(c, lines)
    # No all-gather bucket: the engine all-gathers the updated partitions in place, in the flat params.
    _model_load(c, lines)
    return lines, c.notes


def _stage3_params(c: _Context, lines: Lines) -> None:
    threshold = c.zero.stage3_param_persistence_threshold
    persistent = c.spec.persistent_params(threshold)
    if not c.spec.modules:
        c.notes.append("params kept whole by stage3_param_persistence_threshold are unknown from counts: taken as 0")
    Pp = Q.var("Pp", persistent)
    Pn = c.P - Pp if persistent else c.P
    what = f"{c.word} params of <= {threshold:,} elements, whole on every GPU"
    lines.add(Category.PARAM_PERSISTENT, "gpu", what, c.b * Pp, ALWAYS)
    partition = c.plan.get(Copy.PARAM_PARTITION)
    if partition is None:
        # Gathers cast the fp32 master: only frozen params (which have none) keep a 16-bit partition.
        Pf = Q.var("Pf", _partitioned_frozen(c, threshold))
        what = f"{c.word} partition of the frozen params (trainable ones are gathered from the fp32 master)"
        lines.add(Category.PARAM_PARTITION, "gpu", what, c.b * Pf.per(c.N), ALWAYS)
    elif partition.location is Location.DEVICE:
        lines.add(Category.PARAM_PARTITION, "gpu", f"{c.word} param partition", c.b * Pn.per(c.N), ALWAYS)
    elif partition.location is Location.NVME:
        _nvme_params(c, lines, Pn, partition)
    else:
        shards = param_shards(c.spec, c.zero, c.world_size, Pn, c.N)
        _bound_note(c, shards, "offload_param's param partitions")
        what = f"{c.word} param partitions offloaded to the host, one buffer per module unit"
        where, q = _on_host(c, partition.location, shards, c.b.value, "Ui")
        lines.add(Category.PARAM_PARTITION, where, what, q, ALWAYS)
    if c.spec.largest_layer_params is None:
        c.notes.append("largest layer unknown (pass --largest-layer): the stage-3 working set assumes 0 + prefetch")
    L = Q.var("L", c.spec.largest_layer_params or 0)
    live = Q.var("ML", c.zero.stage3_max_live_parameters)
    prefetch = Q.var("PF", c.zero.stage3_prefetch_bucket_size)
    working_set = smallest(Pn, largest(L, smallest(live, L + prefetch)))
    what = "gathered params: the running module plus prefetch, held to max_live_parameters"
    # Gathered only while modules run: not at the loss, where forward and backward usually peak (_instants.py).
    lines.add(Category.PARAM_GATHERED, "gpu", what, c.b * working_set, FORWARD_BACKWARD, instant="late")
    if c.zero.memory_efficient_linear:
        return
    if c.training.checkpointing == "full":
        _held_under_checkpointing(c, lines, threshold)
        return
    weights = held_linear_weights(c.spec, threshold)
    if weights is None:
        c.notes.append("linear weights unknown from counts: autograd is taken to keep every gathered param")
    W = Q.var("W", Pn.value if weights is None else weights)
    # F.linear saves the gathered weight when its input needs a gradient; the engine finds such weights
    # still alive at the end of forward and files them as held from then on.
    what = "gathered linear weights autograd saves for backward (memory_efficient_linear=false), not yet judged held"
    lines.add(Category.PARAM_GATHERED, "gpu", what, c.b * W, FORWARD)
    what = "gathered linear weights autograd keeps until their backward (memory_efficient_linear=false)"
    lines.add(Category.PARAM_GATHERED_HELD, "gpu", what, c.b * W, BACKWARD)


def _held_under_checkpointing(c: _Context, lines: Lines, threshold: int) -> None:
    """memory_efficient_linear=false under full checkpointing (_held.py): the blocks' forward saves no weight."""
    outside, per_block = held_outside_checkpoints(c.spec, threshold), block_linear_weights(c.spec, threshold)
    if outside is None or per_block is None:
        c.notes.append("linear weights unknown from counts: the LM head is taken to keep all the params gathered")
        outside, per_block = c.spec.total_params, 0
    W = Q.var("Wh", outside)
    # Kept from the head's forward to its backward, the first: at the loss, where stage 3 would have released it.
    what = "gathered weights of the linears outside the checkpointed blocks (the LM head), saved by autograd"
    lines.add(Category.PARAM_GATHERED, "gpu", what, c.b * W, FORWARD, instant="loss")
    what = "gathered weights autograd keeps until the LM head's backward (memory_efficient_linear=false)"
    lines.add(Category.PARAM_GATHERED_HELD, "gpu", what, c.b * W, BACKWARD, instant="loss")
    if c.training.checkpoint_every > 1 and per_block > 0:
        what = ("gathered weights of a rebuilt checkpoint's other blocks, kept until their backward "
                "(memory_efficient_linear=false)")
        blocks = (Q.var("k", c.training.checkpoint_every) - 1) * Q.var("Wb", per_block)
        lines.add(Category.PARAM_GATHERED_HELD, "gpu", what, c.b * blocks, BACKWARD, instant="late")


def _gradients(c: _Context, lines: Lines) -> None:
    if c.zero.stage < 2:
        lines.add(Category.GRAD_FULL, "gpu", f"{c.word} grads, whole (all-reduced)", c.b * c.T, BACKWARD_STEP, instant="late")
        return  # stages 0-1 reduce in place, in the whole gradients: no bucket of their own
    if c.plan.step_granularity is StepGranularity.IN_BACKWARD:
        # Each master tensor steps as its reduced gradient lands, which is then freed: one at a time.
        largest = Q.var("Sm", max(master_tensor_numels(c.spec, c.zero, c.world_size) or [c.T.per(c.N).value]))
        what = "fp32 grad partition of one unit, stepped and freed as it is reduced (step_in_backward)"
        lines.add(Category.GRAD_PARTITION, "gpu", what, 4 * largest, BACKWARD, instant="late")
    elif c.zero.offload_optimizer == "none":
        placed = c.plan.get(Copy.GRAD_PARTITION)
        assert placed is not None, "the plan keeps a gradient partition from stage 2 on"
        word = "fp32" if placed.dtype == "fp32" else c.word
        what = f"{word} grad partition (reduce-scattered during backward)"
        lines.add(Category.GRAD_PARTITION, "gpu", what, DTYPE_BYTES[placed.dtype] * c.T.per(c.N), BACKWARD_STEP,
                  instant="late")
    # The transient reduce buffer holds one bucket; the engine never makes one larger than its largest bucket.
    cap = largest_bucket(c.spec, c.zero)
    bucket = smallest(Q.var("RB", c.zero.reduce_bucket_size), c.T)
    if cap is not None:
        bucket = smallest(bucket, Q.var("Lb", cap))
    if c.zero.overlap:
        # The bucket in flight keeps its buffer until the next one launches, and that one fills meanwhile.
        what = "two gradient reduce buckets (overlap_comm; each at most reduce_bucket_size and the largest bucket)"
        lines.add(Category.GRAD_BUCKET, "gpu", what, c.b * smallest(2 * bucket, c.T), BACKWARD, instant="late")
    else:
        what = "gradient reduce bucket (reduce_bucket_size, at most the largest bucket)"
        lines.add(Category.GRAD_BUCKET, "gpu", what, c.b * bucket, BACKWARD, instant="late")


def _staging(c: _Context, lines: Lines) -> None:
    """gloo's copy of the collective in flight while layers run backward (Training.staged_collectives): from
    stage 2 the reduce-scatter of a gradient bucket (a copy of its input). Stages 0-1 all-reduce in place. Not
    counted: stage 3's all-gathers (a copy of their output), which the calibration grid measured off the late
    instant's peak, and the step's all-gather of the updated params, which comes after the optimizer's
    temporaries are freed."""
    if c.zero.stage >= 2:
        bucket = smallest(Q.var("RB", c.zero.reduce_bucket_size), c.T)
        cap = largest_bucket(c.spec, c.zero)
        if cap is not None:
            bucket = smallest(bucket, Q.var("Lb", cap))
        what = "gloo's copy of the reduce-scatter in flight (one gradient bucket)"
        lines.add(Category.COMM_STAGING, "gpu", what, c.b * bucket, BACKWARD, instant="late")


def _optimizer(c: _Context, lines: Lines) -> None:
    if c.zero.offload_optimizer != "none":
        _offloaded_optimizer(c, lines)
        return
    # The master is a copy with 16-bit compute, or when the params it updates are offloaded.
    if c.training.mixed or c.zero.offload_param != "none":
        lines.add(Category.OPTIM_MASTER, "gpu", "fp32 master params", 4 * c.T_part, ALWAYS)
    # torch's optimizer creates its state inside the first step: none of it exists after initialize.
    what, state = _state(c)
    if c.training.optimizer in ("adam", "adamw"):
        K = Q.var("K", optimizer_shards(c.spec, c.zero, c.world_size, c.T, c.N).count)
        what, state = f"{what}, and a 4-byte step count per master tensor", state + 4 * K
    lines.add(Category.OPTIM_STATE, "gpu", what, state, AFTER_INIT)
    if c.plan.has(Copy.STEP_GRAD):
        # The engine casts every owned gradient to fp32 before the step (all sub-groups at once).
        lines.add(Category.OPTIM_GRAD, "gpu", "fp32 copy of the grads the optimizer steps on", 4 * c.T_part, STEP)
    in_backward = c.plan.step_granularity is StepGranularity.IN_BACKWARD
    sub_group = None if c.plan.step_granularity is StepGranularity.ALL_AT_ONCE else c.zero.sub_group_size
    tensors = master_tensor_numels(c.spec, c.zero, c.world_size)
    temporaries = step_temporaries(c.training.optimizer, c.training.optimizer_impl, c.T_part, tensors, sub_group)
    if temporaries is not None:
        lines.add(Category.OTHER, "gpu", *temporaries, *((BACKWARD, "late") if in_backward else (STEP,)))


def _partitioned_frozen(c: _Context, threshold: int) -> int:
    """Frozen params above the persistence threshold (all frozen params, from bare counts)."""
    if not c.spec.modules:
        return c.spec.total_params - c.spec.trainable_params
    return sum(n * m.count for m in c.spec.modules for n in map(math.prod, m.frozen) if n > threshold)


def _offloaded_optimizer(c: _Context, lines: Lines) -> None:
    """The engine's offloaded optimizer: per shard, an fp32 master and the optimizer's state (pageable:
    the CPU step works on them) and an fp32 gradient buffer (pinned: the device's gradients land in it).

    Nothing of the optimizer stays on the GPU: the CPU step makes no fp32 copy there, and
    micro-batches accumulate in the fp32 gradient buffers, so accumulation adds nothing.
    """
    shards = optimizer_shards(c.spec, c.zero, c.world_size, c.T, c.N)
    _bound_note(c, shards, "offload_optimizer's buffers")
    master = c.placed(Copy.MASTER)
    if master.location is Location.NVME:
        _nvme_optimizer(c, lines, shards, master)
    else:
        S, K = shards.total, Q.var("K", shards.count)
        lines.add(Category.OPTIM_MASTER, str(master.location), "fp32 master params, one tensor per shard", 4 * S, ALWAYS)
        what, state = _offloaded_state(c, S, K)
        lines.add(Category.OPTIM_STATE, str(master.location), what, state, AFTER_INIT)  # made by the first step
    if c.zero.stage == 1:
        # Stage 1 reduces whole 16-bit grads on the GPU; the step copies its slices into these buffers.
        what = "fp32 grads the CPU step reads, one buffer per shard, filled at the step"
        where, q = _on_host(c, c.placed(Copy.STEP_GRAD).location, shards, 4, "Si")
        lines.add(Category.OPTIM_GRAD, where, what, q, ALWAYS)
    else:
        # made by the first backward, where the first reduced gradients land (zero profile: none at init)
        what = "fp32 grad partition, one buffer per shard, reduced grads added to it during backward"
        where, q = _on_host(c, c.placed(Copy.GRAD_PARTITION).location, shards, 4, "Si")
        lines.add(Category.GRAD_PARTITION, where, what, q, AFTER_INIT)


def _nvme_optimizer(c: _Context, lines: Lines, shards: Shards, master: PlacedCopy) -> None:
    """zero-offload's `nvme` device: each master shard cut into swap slices, and each slice's master and
    state tensors a swap file of their own; the step reads them into `buffer_count` buffers one slice
    at a time. The fp32 gradients stay in host memory (_offloaded_optimizer), as with `cpu`.
    """
    files = STATE_TENSORS[c.training.optimizer]
    buffer_numel = _swap_slice(c, files)
    groups = shards.cut(buffer_numel.value, "G")
    what = "fp32 master params in swap files, one per swap slice, in whole blocks"
    lines.add(Category.OPTIM_MASTER, str(master.location), what, groups.blocked(4, "Gi"), ALWAYS)
    what = f"{_swapped_state_name(c)} (fp32) in swap files, one per tensor and swap slice, in whole blocks"
    # (the plan keeps the state where the master is; SGD without momentum has none: a line of 0 bytes)
    lines.add(Category.OPTIM_STATE, str(master.location), what, files * groups.blocked(4, "Gi"), ALWAYS)
    if _STEP_COUNTS[c.training.optimizer]:
        # A step count is not param-sized, so it is not swapped: the engine keeps it in (pageable) memory.
        what = "4-byte step count per swap slice, kept in host memory"
        lines.add(Category.OPTIM_STATE, str(Location.HOST), what, 4 * Q.var("KG", groups.count), ALWAYS)
    pool = Q.var("nb", c.zero.optimizer_buffer_count) * blocks_q(4 * buffer_numel)
    lines.add(Category.SWAP_BUFFER, *_swap_buffers(c, Copy.SWAP_BUFFERS, pool, "optimizer swap buffers (offload_optimizer.buffer_count"), ALWAYS)
    if c.zero.optimizer_buffer_count < 1 + files:
        c.notes.append(
            f"offload_optimizer.buffer_count is {c.zero.optimizer_buffer_count}, but the step swaps {1 + files} "
            f"tensors per sub-group (the fp32 master and {files} state tensor(s)): the engine refuses it at the "
            f"first step; set it to at least {1 + files}"
        )


def _swap_slice(c: _Context, files: int) -> Q:
    """Elements of one swap buffer, as the engine sizes it (zero_plugins.swap_slice_numel): a sub-group, or the
    whole partition when that is smaller (at least 1 element), or less, the budget's slice SL, for an optimizer
    that steps element by element (all but Adafactor, whose step reads the whole tensor's norm)."""
    partition = c.T.per(c.N)
    if not partition.value:
        return Q.const(1)
    sizes = [Q.var("SG", c.zero.sub_group_size), partition]
    if c.training.optimizer != "adafactor":
        sizes.append(Q.var("SL", budget_slice_numel(partition=partition.value, state_tensors=files,
                                                    buffer_count=c.zero.optimizer_buffer_count,
                                                    block_size=c.zero.aio_block_size)))
    return smallest(*sizes)


def _swapped_state_name(c: _Context) -> str:
    name = c.training.optimizer
    return "Adafactor second moment" if name == "adafactor" else _STATE_NAMES[name]


def _nvme_params(c: _Context, lines: Lines, Pn: Q, partition: PlacedCopy) -> None:
    """`offload_param.device: nvme`: unit shards stay in host memory up to max_in_cpu elements (as with
    `cpu`); the rest are a swap file each, read through `buffer_count` buffers when gathered."""
    kept, swapped = param_shards_by_home(c.spec, c.zero, c.world_size, Pn, c.N)
    _bound_note(c, swapped if swapped.count else kept, "offload_param's param partitions")
    # the host side of the plan's NVMe partition: where its swap buffers are (pinned or not)
    kept_where = c.placed(Copy.PARAM_SWAP_BUFFERS).location
    what = f"{c.word} param partitions kept in host memory (offload_param.max_in_cpu), one buffer per unit"
    where, q = _on_host(c, kept_where, kept, c.b.value, "Ui")
    lines.add(Category.PARAM_PARTITION, where, what, q, ALWAYS)
    what = f"{c.word} param partitions past max_in_cpu in swap files, one per unit, in whole blocks"
    lines.add(Category.PARAM_PARTITION, str(partition.location), what, swapped.blocked(c.b.value, "Ui"), ALWAYS)
    if not swapped.count:
        return  # the engine makes the buffers when the first partition goes to a file
    buffer_numel = smallest(Q.var("bs", c.zero.param_buffer_size), Pn.per(c.N))
    pool = Q.var("nb", c.zero.param_buffer_count) * blocks_q(c.b * buffer_numel)
    lines.add(Category.SWAP_BUFFER, *_swap_buffers(c, Copy.PARAM_SWAP_BUFFERS, pool, "param swap buffers (offload_param.buffer_count"), ALWAYS)
    largest_file = max(size for size, _ in swapped.sizes)
    if c.zero.param_buffer_count < 1 or buffer_numel.value < largest_file:
        c.notes.append(
            f"offload_param: each partition in a swap file is read into one buffer, so the engine refuses "
            f"buffer_count {c.zero.param_buffer_count} or buffers of {buffer_numel.value:,} elements "
            f"(buffer_size {c.zero.param_buffer_size:,}) below the largest such partition ({largest_file:,}); "
            f"set buffer_count to 1 or more and buffer_size to at least {largest_file:,}"
        )


def _swap_buffers(c: _Context, copy: Copy, pool: Q, what: str) -> tuple[str, str, Q]:
    """(location, what, bytes) of one swap-buffer allocation of `pool` bytes (zero-offload's aligned_empty).

    Pinned (pin_memory, with a backend that pins, as for every offloaded buffer here), it is the pin
    backend's page-aligned block: exactly `pool` bytes, in whole pages. Otherwise it is pageable memory
    over-allocated by one block, so that a block-aligned start can be cut from it.
    """
    if c.placed(copy).location is Location.HOST_PINNED:
        locked = pages(pool.value, c.page)
        if locked != pool.value:  # only where pages are larger than the 4 KiB blocks
            pool = Q(locked, f"pages({pool.symbols})", f"pages({pool.numbers})")
        return str(Location.HOST_PINNED), f"{what} x buffer, one pinned allocation)", pool
    return str(Location.HOST), f"{what} x buffer, one allocation, + a block to align its start)", pool + SWAP_BLOCK


def _offloaded_state(c: _Context, S: Q, K: Q) -> tuple[str, Q]:
    """The state of the optimizer the engine steps on the host, over its flat (1-D) master tensors."""
    name = c.training.optimizer
    if name in ("adam", "adamw"):
        return "Adam m and v (fp32), and a 4-byte step count per master tensor (CPUAdam)", 8 * S + 4 * K
    if name == "adafactor":
        # torch's Adafactor factors only matrices: on a flat master it keeps the whole second moment.
        what = "Adafactor second moment (fp32; whole on the flat master), and a 4-byte step count per tensor"
        return what, 4 * S + 4 * K
    return f"{_STATE_NAMES[name]} (fp32)", Q.const(STATE_BYTES[name]) * S


def _on_host(c: _Context, where: Location, shards: Shards, per_element: int, each: str) -> tuple[str, Q]:
    """(location, bytes) of shards held in host memory that device transfers use, where the plan puts
    them: pinned buffers are each locked in whole pages."""
    if where is Location.HOST_PINNED:
        return str(where), shards.paged(per_element, c.page, each)
    return str(where), per_element * shards.total


def _bound_note(c: _Context, shards: Shards, what: str) -> None:
    if shards.exact:
        return
    c.notes.append(
        f"{what}: the buckets and units are unknown from counts, so these offload lines are lower bounds "
        f"(one buffer of {shards.total.symbols} elements); each further buffer adds under N elements of "
        f"padding, up to a page when pinned, and a 4-byte step count (use --preset, --config or a live module)"
    )


def _state(c: _Context) -> tuple[str, Q]:
    name = c.training.optimizer
    if name != "adafactor":
        return f"{_STATE_NAMES[name]} (fp32)", Q.const(STATE_BYTES[name]) * c.T_part
    factored = c.spec.factored_state_elements()
    if factored is None:
        raise EstimateError(
            "adafactor's state depends on the parameter shapes; use --preset or --config, or another optimizer",
            "optimizer",
        )
    F = Q.var("F", factored)
    return "Adafactor row and column second moments (fp32)", 4 * (F if c.zero.stage == 0 else F.per(c.N))


def _model_load(c: _Context, lines: Lines) -> None:
    if c.zero.stage == 3 and c.zero.zero_init:
        if c.spec.largest_layer_params is None:
            c.notes.append("host memory for zero.Init model load unknown without --largest-layer")
            return
        what = "fp32 layer each GPU's process builds at a time under zero.Init"
        lines.add(Category.OTHER, "host", what, 4 * Q.var("L", c.spec.largest_layer_params), INIT, instant=BUILD)
        return
    lines.add(Category.OTHER, "host", "fp32 model each GPU's process builds before moving it", 4 * c.P, INIT, instant=BUILD)
