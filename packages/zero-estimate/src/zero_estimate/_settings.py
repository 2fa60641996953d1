"""The inputs of an estimate besides the model: hardware, training loop and ZeRO settings.

ZeroSettings is a view of the ds_config keys that decide memory (ZERO_KEYS): its defaults are the schema's,
read from zero_plugins' pydantic-free table of them, so an estimate reads like the config it describes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from zero_plugins import DEFAULT_ATTENTION, AttentionKind, ds_default, overlap_comm_default
from zero_plugins.placement import PlacementPlan, PlanInputs, build_plan

from . import _checks
from ._errors import EstimateError

# Bytes per element of the params, gradients and activations the model computes with.
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor")
# Each optimizer's fp32 state tensors of a parameter's size (Adafactor's second moment is whole on a flat master).
STATE_TENSORS = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0, "adafactor": 1}
# How torch steps the fp32 master (optimizer_impl): foreach on a GPU by default, tensor by tensor on a CPU
# device, fused when the config asks for it.
OPTIMIZER_IMPLS = ("foreach", "single-tensor", "fused")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
CHECKPOINTING = ("none", "selective", "full")
ATTENTION = tuple(kind.value for kind in AttentionKind)
DEFAULT_SEQ_LEN = 2048
_KEY = "ds_config_key"  # the metadata of a ZeroSettings field that stands for a ds_config key


def _key(key: str) -> Any:
    """A ZeroSettings field that stands for the ds_config `key` (dotted): the schema's default, the key as metadata."""
    return field(default=ds_default(key), metadata={_KEY: key})


@dataclass(frozen=True)
class Cluster:
    """Data-parallel GPUs: `gpus_per_node` on each of `nodes` machines.

    page_size: the hosts' memory page in bytes; pinned host memory is locked in whole pages.
    """

    gpus_per_node: int = 1
    nodes: int = 1
    page_size: int = 4096

    def __post_init__(self) -> None:
        _checks.count(self.gpus_per_node, "gpus_per_node")
        _checks.count(self.nodes, "nodes")
        _checks.count(self.page_size, "page_size")

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Training:
    """The training loop: precision, optimizer, batch shape, activation checkpointing.

    seq_len None means 2048, or the model's learned positions if fewer.
    attention: the attention kernel (ATTENTION, zero_plugins.AttentionKind): "sdpa" (the default, as in
    transformers) and "flash" keep the output and an fp32 logsumexp per query, "eager" the s x s probabilities.
    checkpointing "full": each checkpoint keeps only its first layer's input and rebuilds its
    layers in backward. checkpoint_every: layers per checkpoint (1: every layer); a model of
    n layers makes ceil(n/k) checkpoints, DeepSpeed's `number_checkpoints`.
    cpu_checkpointing: the checkpointed inputs are kept in pinned host memory, not on the GPU
    (DeepSpeed's `activation_checkpointing.cpu_checkpointing`).
    offload_activations: what every layer saves for backward is kept in pinned host memory
    (`zero_core.checkpointing.offload_saved_activations` of the layers); not with full checkpointing.
    optimizer_impl: how torch steps the master, which decides its step temporaries (OPTIMIZER_IMPLS).
    staged_collectives: the collectives copy their whole buffer while they run (gloo, the CPU accelerator's
    backend: an all-gather into a copy of its output, a reduce-scatter from a copy of its input; NCCL
    works in place). `zero profile` sets it on the CPU accelerator.
    """

    precision: str = "bf16"
    optimizer: str = "adamw"
    micro_batch: int = 1
    seq_len: int | None = None
    grad_accum: int = 1
    checkpointing: str = "none"
    attention: str = DEFAULT_ATTENTION.value
    checkpoint_every: int = 1
    cpu_checkpointing: bool = False
    offload_activations: bool = False
    optimizer_impl: str = "foreach"
    staged_collectives: bool = False

    def __post_init__(self) -> None:
        _checks.choice(self.precision, "precision", PRECISION_BYTES)
        _checks.choice(self.optimizer, "optimizer", OPTIMIZERS)
        _checks.choice(self.optimizer_impl, "optimizer_impl", OPTIMIZER_IMPLS)
        _checks.choice(self.attention, "attention", ATTENTION)
        _checks.count(self.micro_batch, "micro_batch")
        if self.seq_len is not None:
            _checks.count(self.seq_len, "seq_len")
        _checks.count(self.grad_accum, "grad_accum")
        _checks.choice(self.checkpointing, "checkpointing", CHECKPOINTING)
        _checks.count(self.checkpoint_every, "checkpoint_every")
        if self.checkpointing != "full" and (self.checkpoint_every != 1 or self.cpu_checkpointing):
            what = "checkpoint_every" if self.checkpoint_every != 1 else "cpu_checkpointing"
            raise EstimateError(
                f"needs full activation checkpointing (got checkpointing {self.checkpointing!r}); "
                "set checkpointing to 'full'",
                what,
            )
        if self.offload_activations and self.checkpointing == "full":
            raise EstimateError(
                "offloads what the layers save, and full checkpointing saves only their inputs; "
                "use cpu_checkpointing to keep those in host memory, or checkpointing 'none'",
                "offload_activations",
            )

    @property
    def param_bytes(self) -> int:
        return PRECISION_BYTES[self.precision]

    @property
    def mixed(self) -> bool:
        """16-bit compute with an fp32 master copy for the optimizer."""
        return self.precision != "fp32"

    def number_checkpoints(self, num_layers: int) -> int:
        """Checkpoints a model of `num_layers` makes per forward: ceil(n/k) with full checkpointing, else 0."""
        return -(-num_layers // self.checkpoint_every) if self.checkpointing == "full" else 0

    def checkpointing_dict(self, num_layers: int | None) -> dict[str, object]:
        """The activation-checkpointing inputs, for JSON output."""
        return {
            "checkpointing": self.checkpointing,
            "checkpoint_every": self.checkpoint_every,
            "number_checkpoints": None if num_layers is None else self.number_checkpoints(num_layers),
            "cpu_checkpointing": self.cpu_checkpointing,
            "offload_activations": self.offload_activations,
        }


@dataclass(frozen=True)
class ZeroSettings:
    """A `zero_optimization` block: the stage, offload devices, buckets and stage-3 bounds. Each field names the
    ds_config key it stands for (ZERO_KEYS) and takes that key's default from the schema's table of them.

    The offload blocks' `pipeline_read`/`pipeline_write` are not here: they change when swaps
    run, not what memory they take (the buffer_count buffers are allocated either way).
    step_in_backward: stage 3 steps each unit as its gradient is reduced (zero's own opt-in).
    aio_block_size: NVMe swap slices are whole blocks (zero_plugins.swap_slice_numel).
    """

    stage: int = _key("zero_optimization.stage")
    offload_optimizer: str = _key("zero_optimization.offload_optimizer.device")
    offload_param: str = _key("zero_optimization.offload_param.device")
    reduce_bucket_size: int = _key("zero_optimization.reduce_bucket_size")
    allgather_bucket_size: int = _key("zero_optimization.allgather_bucket_size")
    # None: left out, so it follows the stage (overlap_comm_default)
    overlap_comm: bool | None = field(default=None, metadata={_KEY: "zero_optimization.overlap_comm"})
    sub_group_size: int = _key("zero_optimization.sub_group_size")
    stage3_prefetch_bucket_size: int = _key("zero_optimization.stage3_prefetch_bucket_size")
    stage3_param_persistence_threshold: int = _key("zero_optimization.stage3_param_persistence_threshold")
    stage3_max_live_parameters: int = _key("zero_optimization.stage3_max_live_parameters")
    memory_efficient_linear: bool = _key("zero_optimization.memory_efficient_linear")
    zero_init: bool = True  # an option of DeepSpeed's estimate functions, not a ds_config key
    # Both offload blocks' pin_memory (their defaults agree): the estimate pins both or neither.
    pin_memory: bool = ds_default("zero_optimization.offload_optimizer.pin_memory")
    optimizer_buffer_count: int = _key("zero_optimization.offload_optimizer.buffer_count")
    param_buffer_count: int = _key("zero_optimization.offload_param.buffer_count")
    param_buffer_size: int = _key("zero_optimization.offload_param.buffer_size")
    param_max_in_cpu: int = _key("zero_optimization.offload_param.max_in_cpu")
    step_in_backward: bool = _key("zero_optimization.step_in_backward")
    aio_block_size: int = _key("aio.block_size")

    def __post_init__(self) -> None:
        if self.stage not in (0, 1, 2, 3) or isinstance(self.stage, bool):
            raise EstimateError(f"must be 0, 1, 2 or 3 (got {self.stage!r})", "stage")
        _checks.choice(self.offload_optimizer, "offload_optimizer", OFFLOAD_DEVICES)
        _checks.choice(self.offload_param, "offload_param", OFFLOAD_DEVICES)
        _checks.count(self.reduce_bucket_size, "reduce_bucket_size")
        for name in (
            "allgather_bucket_size",
            "sub_group_size",
            "stage3_prefetch_bucket_size",
            "stage3_param_persistence_threshold",
            "stage3_max_live_parameters",
            "optimizer_buffer_count",
            "param_buffer_count",
            "param_buffer_size",
            "param_max_in_cpu",
        ):
            _checks.count(getattr(self, name), name, minimum=0)
        _checks.count(self.aio_block_size, "aio_block_size")
        if self.offload_optimizer != "none" and self.stage == 0:
            raise EstimateError("offloading the optimizer needs ZeRO stage 1, 2 or 3", "offload_optimizer")
        if self.offload_param != "none" and self.stage != 3:
            raise EstimateError("offloading params needs ZeRO stage 3, where params are partitioned", "offload_param")
        if self.step_in_backward and (self.stage != 3 or self.label() != "none/none"):
            raise EstimateError("needs stage 3 with nothing offloaded (it steps on the device as gradients are "
                                "reduced)", "step_in_backward")

    @property
    def overlap(self) -> bool:
        return overlap_comm_default(self.stage) if self.overlap_comm is None else self.overlap_comm

    def label(self) -> str:
        """Offload devices as optimizer/param ("cpu/none"), for tables."""
        return f"{self.offload_optimizer}/{self.offload_param}"


# ZeroSettings field -> the dotted ds_config key it stands for (every field but pin_memory and zero_init).
ZERO_KEYS = {item.name: str(item.metadata[_KEY]) for item in fields(ZeroSettings) if _KEY in item.metadata}


def placement_plan(zero: ZeroSettings, training: Training, cluster: Cluster) -> PlacementPlan:
    """The engine's placement plan for these settings: the same rules decide every copy for both."""
    return build_plan(PlanInputs(
        stage=zero.stage, compute_dtype=training.precision, world_size=cluster.world_size,
        offload_optimizer=zero.offload_optimizer, offload_param=zero.offload_param,
        optimizer_pin_memory=zero.pin_memory, param_pin_memory=zero.pin_memory,
        optimizer_state_tensors=STATE_TENSORS[training.optimizer], step_in_backward=zero.step_in_backward,
        optimizer_buffer_count=zero.optimizer_buffer_count, param_buffer_count=zero.param_buffer_count,
        param_max_in_cpu=zero.param_max_in_cpu,
    ))
