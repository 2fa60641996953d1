"""The placement plan: every copy of model state, with its dtype, location, lifetime and extent, decided once.

Built from the ds_config's choices (`PlanInputs`), the world size and the accelerator, with no
torch: the engine's assembly (zero-core's homes and stage policy) and the estimator read the
same plan, and `zero estimate --explain` prints it. A copy the plan does not list does not
exist: at stage 3 with 16-bit compute and the fp32 master on the device there is no 16-bit
partition, because every gather casts the master shard, as FSDP2 does.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ._kinds import Copy, Extent, Lifetime, Location, StepGranularity

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ALIVE_AT_STEP = frozenset({Lifetime.AT_REST, Lifetime.DURING_BACKWARD, Lifetime.AT_STEP})


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """What decides placement: the stage, the compute dtype, the offload blocks and the opt-ins."""

    stage: int
    compute_dtype: str  # "bf16", "fp16" or "fp32"
    world_size: int = 1
    accelerator: str = "cuda"  # the device type each rank computes on
    offload_optimizer: str = "none"  # the offload device's registered name, or "none"
    offload_param: str = "none"
    optimizer_pin_memory: bool = False
    param_pin_memory: bool = False
    swap_devices: frozenset[str] = frozenset({"nvme"})  # offload devices that keep copies in swap files
    step_in_backward: bool = False
    optimizer_state_tensors: int = 2  # fp32 tensors of a parameter's size the optimizer keeps (Adam: m and v)
    # The swap budgets, from the offload blocks (needed only where a block's device keeps swap files): the
    # optimizer's and the partitions' buffer counts, and the partition elements kept in host memory first.
    optimizer_buffer_count: int = 1
    param_buffer_count: int = 1
    param_max_in_cpu: int = 0

    def __post_init__(self) -> None:
        if self.stage not in (0, 1, 2, 3):
            raise ValueError(f"stage must be 0, 1, 2 or 3 (got {self.stage!r})")
        if self.compute_dtype not in DTYPE_BYTES:
            raise ValueError(f"compute_dtype must be one of {', '.join(DTYPE_BYTES)} (got {self.compute_dtype!r})")
        if self.world_size < 1:
            raise ValueError(f"world_size must be at least 1 (got {self.world_size})")


@dataclass(frozen=True)
class PlacedCopy:
    copy: Copy
    dtype: str
    location: Location
    lifetime: Lifetime
    extent: Extent
    offload_device: str | None = None  # the offload device that holds it, by registered name
    why: str = ""
    tensors: int = 1  # tensors of this extent (Adam's state: m and v; a pool's buffer_count buffers)
    # In swap files: the elements of this rank's copy kept in host memory first (offload_param.max_in_cpu);
    # None: the whole copy is at `location`.
    in_memory_elements: int | None = None

    @property
    def element_bytes(self) -> int:
        """Bytes per element of its extent, over all its tensors."""
        return DTYPE_BYTES[self.dtype] * self.tensors

    def row(self) -> dict[str, str]:
        dtype = self.dtype if self.tensors == 1 else f"{self.tensors} x {self.dtype}"
        return {"copy": str(self.copy), "dtype": dtype, "location": str(self.location),
                "lifetime": str(self.lifetime), "extent": str(self.extent), "why": self.why}


@dataclass(frozen=True)
class PlacementPlan:
    inputs: PlanInputs
    copies: tuple[PlacedCopy, ...]
    step_granularity: StepGranularity
    _by_copy: dict[Copy, PlacedCopy] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_copy", {placed.copy: placed for placed in self.copies})

    def __iter__(self) -> Iterator[PlacedCopy]:
        return iter(self.copies)

    def get(self, copy: Copy) -> PlacedCopy | None:
        """The copy's placement; None when the plan keeps no such copy."""
        return self._by_copy.get(copy)

    def has(self, copy: Copy) -> bool:
        return copy in self._by_copy

    @property
    def params_cast_from_master(self) -> bool:
        """Stage 3 gathers by casting the fp32 master shard: no compute-dtype partition exists."""
        return self.inputs.stage == 3 and not self.has(Copy.PARAM_PARTITION)

    @property
    def master_is_params(self) -> bool:
        """fp32 compute with nothing offloaded: the optimizer steps the parameters themselves."""
        return not self.has(Copy.MASTER)

    def offloaded(self, copy: Copy) -> str | None:
        placed = self.get(copy)
        return placed.offload_device if placed is not None else None

    def bytes_per_parameter_at_step(self) -> float:
        """Model-state bytes a rank holds at the step per element of its partition (P/N): the headline figure
        (FSDP2 holds 16 in bf16 mixed precision with AdamW); the step's temporaries are not state, nor are frozen
        params (their partition is per frozen element) and the small params kept whole. Whole copies count N times; copies bounded by a
        bucket, a unit or a sub-group, and copies off the device, not at all."""
        total = 0.0
        for placed in self.copies:
            if placed.copy is Copy.STEP_TEMPORARIES:
                continue  # not state: what a kernel call allocates, bounded by its granularity
            if placed.location is not Location.DEVICE or placed.lifetime not in ALIVE_AT_STEP:
                continue
            if placed.extent is Extent.PARTITION:
                total += placed.element_bytes
            elif placed.extent is Extent.WHOLE:
                total += placed.element_bytes * self.inputs.world_size
        return total

    def swap_budget(self, copy: Copy) -> tuple[int, int | None]:
        """(buffers, elements kept in host memory) of `copy` in swap files: its pool's buffer count, and None
        for a copy whose elements are all in swap files (the master and the state)."""
        placed = self.get(copy)
        assert placed is not None and placed.location is Location.NVME, f"the plan keeps no {copy} in swap files"
        pool = self.get(Copy.SWAP_BUFFERS if copy in (Copy.MASTER, Copy.OPTIMIZER_STATE) else Copy.PARAM_SWAP_BUFFERS)
        assert pool is not None
        return pool.tensors, placed.in_memory_elements

    def rows(self) -> list[dict[str, str]]:
        return [placed.row() for placed in self.copies]

    def as_dict(self) -> dict[str, object]:
        """The plan in JSON (zero estimate's and zero profile's `placement`)."""
        return {"copies": self.rows(), "step": str(self.step_granularity),
                "model_state_bytes_per_param": self.bytes_per_parameter_at_step()}

    def summary(self) -> str:
        """One line for reports."""
        return (f"{self.bytes_per_parameter_at_step():g} B of model states per element of a partition at the step "
                f"(FSDP2: 16 in bf16 with AdamW); the optimizer steps {self.step_granularity}")
