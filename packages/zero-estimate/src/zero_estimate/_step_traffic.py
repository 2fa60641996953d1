"""A throughput proxy: what one optimizer step moves and computes per rank, and how transfer-bound that makes it.

Bytes and FLOPs are counted from the configuration alone (docs/estimate.md, "How `zero plan --verify` ranks");
the transfer-bound fraction and the ranking key weigh them by nominal rates (`Rates`), which are assumptions
about the hardware, never measurements: no time is claimed, only which configuration waits on transfers and
how much, relative to the others.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from . import _checks
from ._estimate import Estimate
from ._settings import STATE_TENSORS

# fp32 master and optimizer state, per element.
_FP32 = 4


@dataclass(frozen=True)
class Rates:
    """Nominal peak rates, per GPU unless said: the proxy's assumptions (an A100-class node, docs/estimate.md).

    flops_16bit: dense bf16/fp16 tensor-core FLOP/s (A100: 312e12). flops_fp32: plain fp32 FLOP/s (A100: 19.5e12;
    torch does not use TF32 for matmuls unless asked). nvlink: bytes/s one way between GPUs of a node (A100's
    NVLink 3: 600 GB/s both ways). network: bytes/s one way per GPU between nodes (one 200 Gb/s HDR InfiniBand
    port per GPU). pcie: bytes/s each way between a GPU and host memory (PCIe 4.0 x16, 32 GB/s). nvme: bytes/s
    of the node's NVMe, read and write together, shared by the node's GPUs (a PCIe 4.0 drive: ~7 GB/s reads,
    ~5 GB/s writes).
    """

    flops_16bit: float = 312e12
    flops_fp32: float = 19.5e12
    nvlink: float = 300e9
    network: float = 25e9
    pcie: float = 32e9
    nvme: float = 6e9

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            _checks.positive_number(value, name)


@dataclass(frozen=True)
class StepTraffic:
    """One optimizer step (all its micro-batches), per rank.

    gathered_bytes / reduced_bytes: what the rank sends in the step's all-gathers, and in its reduce-scatters
    and all-reduces, under the ring algorithm (as the engine's ledger counts them, docs/engine.md
    "Communication"), in `collective_dtype`. host_to_device_bytes / device_to_host_bytes: copies over PCIe for
    CPU and NVMe offload. nvme_read_bytes / nvme_write_bytes: NVMe swaps. model_flops: forward and backward
    matmul FLOPs of the tokens; recompute_flops: the extra forward of full activation checkpointing.
    transfer_bound: the fraction of the step the proxy predicts compute waits on transfers (0: compute-bound).
    cost_per_token: the ranking key (lower is better): nominal step time per token at `Rates`, meaningful only
    relative to other candidates' at the same rates.
    """

    tokens: int
    collective_dtype: str
    gathered_bytes: int
    reduced_bytes: int
    host_to_device_bytes: int
    device_to_host_bytes: int
    nvme_read_bytes: int
    nvme_write_bytes: int
    model_flops: int
    recompute_flops: int
    transfer_bound: float
    cost_per_token: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def step_traffic(estimate: Estimate, rates: Rates | None = None) -> StepTraffic:
    """The step's traffic and FLOPs for the configuration `estimate` was made for."""
    rates = rates or Rates()
    model, training, zero, cluster = estimate.model, estimate.training, estimate.zero, estimate.cluster
    world, micro_batches, width = cluster.world_size, training.grad_accum, training.param_bytes
    tokens = training.micro_batch * estimate.seq_len * micro_batches
    total, trainable = model.total_params, model.trainable_params
    # Passes over the weights per micro-batch: forward, backward, and the recompute of full checkpointing.
    passes = 3 if training.checkpointing == "full" else 2
    gathered = reduced = 0
    if zero.stage == 3:
        persistent = model.persistent_params(zero.stage3_param_persistence_threshold)
        trainable_persistent = _trainable_persistent(estimate)
        gathered = micro_batches * passes * _ring(world, (total - persistent) * width)
        reduced = micro_batches * (_ring(world, (trainable - trainable_persistent) * width)
                                   + 2 * _ring(world, trainable_persistent * width))
    elif zero.stage == 0:
        reduced = 2 * _ring(world, trainable * width)  # one all-reduce at the boundary
    else:
        reductions = micro_batches if zero.stage == 2 else 1  # stage 2 reduce-scatters every micro-batch
        reduced = reductions * _ring(world, trainable * width)
        gathered = _ring(world, trainable * width)  # the updated weights, after the step
    to_device, to_host, nvme_read, nvme_write = _offload_traffic(estimate, passes)
    model_flops = (4 * total + 2 * trainable) * tokens  # forward 2P, input gradients 2P, weight gradients 2T
    recompute_flops = 2 * total * tokens if training.checkpointing == "full" else 0
    flop_rate = rates.flops_fp32 if training.precision == "fp32" else rates.flops_16bit
    compute = (model_flops + recompute_flops) / flop_rate
    collectives = (gathered + reduced) / (rates.nvlink if cluster.nodes == 1 else rates.network)
    host = max(to_device, to_host) / rates.pcie  # the two directions run at once
    nvme = (nvme_read + nvme_write) / (rates.nvme / cluster.gpus_per_node)
    # Each resource runs alongside the others; collectives hold compute up unless overlap_comm overlaps them.
    step = max(compute + (0.0 if zero.overlap else collectives), collectives, host, nvme)
    return StepTraffic(
        tokens=tokens,
        collective_dtype=training.precision,
        gathered_bytes=gathered,
        reduced_bytes=reduced,
        host_to_device_bytes=to_device,
        device_to_host_bytes=to_host,
        nvme_read_bytes=nvme_read,
        nvme_write_bytes=nvme_write,
        model_flops=model_flops,
        recompute_flops=recompute_flops,
        transfer_bound=1 - compute / step,
        cost_per_token=step / tokens,
    )


def _ring(world: int, payload: int) -> int:
    """Bytes one rank sends in a ring all-gather or reduce-scatter of `payload` bytes (whole bytes)."""
    return (world - 1) * payload // world


def _shard(world: int, elements: int) -> int:
    """Elements of one rank's partition (padded to a multiple of the world size)."""
    return -(-elements // world)


def _trainable_persistent(estimate: Estimate) -> int:
    """Trainable params ZeRO-3 keeps whole: their gradients are all-reduced, not reduce-scattered."""
    threshold = estimate.zero.stage3_param_persistence_threshold
    return sum(math.prod(shape) * m.count for m in estimate.model.modules for shape in m.trainable
               if math.prod(shape) <= threshold)


def _offload_traffic(estimate: Estimate, passes: int) -> tuple[int, int, int, int]:
    """(host->device, device->host, NVMe read, NVMe write) bytes per step, per rank (docs/offload.md)."""
    model, training, zero, world = estimate.model, estimate.training, estimate.zero, estimate.cluster.world_size
    width, micro_batches = training.param_bytes, training.grad_accum
    trainable_shard = _shard(world, model.trainable_params) * width
    to_device = to_host = nvme_read = nvme_write = 0
    if zero.offload_optimizer != "none":
        # Reduced gradient slices go down (every micro-batch from stage 2 on; stage 1 once, at the boundary).
        to_host += (micro_batches if zero.stage >= 2 else 1) * trainable_shard
        if zero.offload_param == "none":
            to_device += trainable_shard  # the updated weights come back up
    elif zero.offload_param != "none":
        to_host += trainable_shard  # the device step's updated weights go back to their host shard
    if zero.offload_param != "none":
        persistent = model.persistent_params(zero.stage3_param_persistence_threshold)
        shard_in = micro_batches * passes * _shard(world, model.total_params - persistent) * width
        to_device += shard_in  # each gather copies this rank's shard up first
        if zero.offload_param == "nvme":
            nvme_read += shard_in
            nvme_write += trainable_shard  # the updated trainable shard, written back
    if zero.offload_optimizer == "nvme":
        # The fp32 master and the optimizer's state tensors are read and written back once per step.
        swapped = _shard(world, model.trainable_params) * _FP32 * (1 + STATE_TENSORS[training.optimizer])
        nvme_read += swapped
        nvme_write += swapped
    return to_device, to_host, nvme_read, nvme_write
