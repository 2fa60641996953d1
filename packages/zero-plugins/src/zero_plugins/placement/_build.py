"""The one set of placement rules: which copies exist, where, and when, for every stage and offload choice."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._kinds import Copy, Extent, Lifetime, Location, StepGranularity
from ._plan import PlacedCopy, PlacementPlan, PlanInputs
from ._state import optimizer_state_tensors

if TYPE_CHECKING:
    from ..ds_config import ZeroConfig


def build_plan(inputs: PlanInputs) -> PlacementPlan:
    rules = _Rules(inputs)
    copies = [placed for placed in (rules.params(), rules.partition(), rules.persistent(), rules.frozen(),
                                    rules.master(), *rules.gradients(),
                                    rules.step_grad(), rules.state(), rules.temporaries(), *rules.swap_buffers())
              if placed is not None]
    return PlacementPlan(inputs, tuple(copies), rules.granularity())


class _Rules:
    def __init__(self, inputs: PlanInputs) -> None:
        self.i = inputs
        self.mixed = inputs.compute_dtype != "fp32"
        self.optimizer_device = None if inputs.offload_optimizer == "none" else inputs.offload_optimizer
        self.param_device = None if inputs.offload_param == "none" or inputs.stage != 3 else inputs.offload_param
        # The master is a copy with 16-bit compute, or when it and the parameters live apart.
        self.has_master = self.mixed or self.optimizer_device is not None or self.param_device is not None
        self.master_location = self._offloaded_location(self.optimizer_device, pinned=False)
        # Stage 3 keeps no compute-dtype partition of trained params where the fp32 master is on the device and
        # the params are not offloaded: every gather casts the master shard.
        self.casts_from_master = (inputs.stage == 3 and self.mixed and self.param_device is None
                                  and self.master_location is Location.DEVICE)

    def _offloaded_location(self, device: str | None, *, pinned: bool) -> Location:
        if device is None:
            return Location.DEVICE
        if device in self.i.swap_devices:
            return Location.NVME
        return Location.HOST_PINNED if pinned else Location.HOST

    def params(self) -> PlacedCopy:
        dtype = self.i.compute_dtype
        if self.i.stage < 3:
            return PlacedCopy(Copy.PARAMS_WHOLE, dtype, Location.DEVICE, Lifetime.AT_REST, Extent.WHOLE,
                              why="stages 0-2 keep every parameter on every rank")
        return PlacedCopy(Copy.PARAMS_GATHERED, dtype, Location.DEVICE, Lifetime.DURING_GATHER, Extent.UNIT,
                          why="gathered module by module for its forward and its backward")

    def partition(self) -> PlacedCopy | None:
        if self.i.stage < 3:
            return None
        dtype = self.i.compute_dtype
        if self.param_device is not None:
            where = self._offloaded_location(self.param_device, pinned=self.i.param_pin_memory)
            why = "offload_param: the 16-bit copy halves each transfer"
            kept = None
            if where is Location.NVME:
                why += "; the first max_in_cpu elements stay in host memory"
                kept = self.i.param_max_in_cpu
            return PlacedCopy(Copy.PARAM_PARTITION, dtype, where, Lifetime.AT_REST, Extent.PARTITION,
                              self.param_device, why=why, in_memory_elements=kept)
        if self.casts_from_master:
            return None
        why = ("the master is offloaded, so gathers read a 16-bit copy on the device" if self.has_master
               else "fp32 compute: the partition is also the master the optimizer steps")
        return PlacedCopy(Copy.PARAM_PARTITION, dtype, Location.DEVICE, Lifetime.AT_REST, Extent.PARTITION, why=why)

    def persistent(self) -> PlacedCopy | None:
        if self.i.stage < 3:
            return None
        return PlacedCopy(Copy.PARAMS_PERSISTENT, self.i.compute_dtype, Location.DEVICE, Lifetime.AT_REST, Extent.SMALL,
                          why="at most stage3_param_persistence_threshold elements: whole on every rank")

    def frozen(self) -> PlacedCopy | None:
        if self.i.stage < 3:
            return None
        where = self._offloaded_location(self.param_device, pinned=self.i.param_pin_memory)
        return PlacedCopy(Copy.FROZEN_PARTITION, self.i.compute_dtype, where, Lifetime.AT_REST, Extent.FROZEN,
                          self.param_device, why="frozen params (LoRA bases) have no master to cast from")

    def master(self) -> PlacedCopy | None:
        if not self.has_master:
            return None
        extent = Extent.WHOLE if self.i.stage == 0 else Extent.PARTITION
        return PlacedCopy(Copy.MASTER, "fp32", self.master_location, Lifetime.AT_REST, extent, self.optimizer_device,
                          why="what the optimizer steps" + ("; gathers cast it" if self.casts_from_master else ""))

    def gradients(self) -> list[PlacedCopy]:
        dtype = self.i.compute_dtype
        if self.i.stage < 2:
            return [PlacedCopy(Copy.GRAD_WHOLE, dtype, Location.DEVICE, Lifetime.DURING_BACKWARD, Extent.WHOLE,
                               why="stages 0-1 all-reduce or reduce-scatter whole gradients at the boundary")]
        bucket = PlacedCopy(Copy.GRAD_BUCKET, dtype, Location.DEVICE, Lifetime.DURING_BACKWARD, Extent.BUCKET,
                            why="reduce-scattered in buckets during backward")
        if self.optimizer_device is not None:
            # in host memory at every offload device, NVMe's too: the device's gradients land there
            partition = PlacedCopy(Copy.GRAD_PARTITION, "fp32", _host(self.i.optimizer_pin_memory), Lifetime.AT_REST, Extent.PARTITION,
                                   self.optimizer_device, why="reduced gradients land where the CPU step reads them")
        elif self.i.step_in_backward:
            partition = PlacedCopy(Copy.GRAD_PARTITION, "fp32", Location.DEVICE, Lifetime.DURING_BACKWARD,
                                   Extent.UNIT, why="one unit's at a time: it steps and is freed once reduced")
        elif self.i.stage == 3:
            partition = PlacedCopy(Copy.GRAD_PARTITION, "fp32", Location.DEVICE, Lifetime.DURING_BACKWARD,
                                   Extent.PARTITION, why="reduced straight into fp32: no 16-bit + fp32 pair at the step")
        else:
            partition = PlacedCopy(Copy.GRAD_PARTITION, dtype, Location.DEVICE, Lifetime.DURING_BACKWARD,
                                   Extent.PARTITION, why="reduce-scattered during backward")
        return [bucket, partition]

    def step_grad(self) -> PlacedCopy | None:
        """An fp32 copy of the gradients the step makes where the gradients it reads are not fp32 there."""
        if not self.mixed and self.optimizer_device is None:
            return None
        if self.optimizer_device is not None:
            if self.i.stage != 1:
                return None  # reduced gradients are added to fp32 buffers at the offload device during backward
            return PlacedCopy(Copy.STEP_GRAD, "fp32", _host(self.i.optimizer_pin_memory), Lifetime.AT_REST, Extent.PARTITION, self.optimizer_device,
                              why="stage 1 reduces 16-bit gradients on the device; the step copies its slices here")
        if self.i.stage == 3:
            return None
        extent = Extent.WHOLE if self.i.stage == 0 else Extent.PARTITION
        return PlacedCopy(Copy.STEP_GRAD, "fp32", Location.DEVICE, Lifetime.AT_STEP, extent,
                          why="the step casts the 16-bit gradients it owns")

    def state(self) -> PlacedCopy | None:
        if not self.i.optimizer_state_tensors:
            return None  # SGD without momentum
        extent = Extent.WHOLE if self.i.stage == 0 else Extent.PARTITION
        return PlacedCopy(Copy.OPTIMIZER_STATE, "fp32", self.master_location, Lifetime.AT_REST, extent,
                          self.optimizer_device, why="made by the first step", tensors=self.i.optimizer_state_tensors)

    def temporaries(self) -> PlacedCopy:
        where = Location.DEVICE if self.optimizer_device is None else Location.HOST
        extent = {StepGranularity.ALL_AT_ONCE: Extent.WHOLE if self.i.stage == 0 else Extent.PARTITION}.get(
            self.granularity(), Extent.SUB_GROUP)
        return PlacedCopy(Copy.STEP_TEMPORARIES, "fp32", where, Lifetime.AT_STEP, extent,
                          why=f"the optimizer's kernels: {self.granularity()}")

    def swap_buffers(self) -> list[PlacedCopy]:
        """The optimizer's swap buffers (fp32, one swap slice each) and the partitions' (compute dtype): host
        memory that streams each device's swap files."""
        pools = []
        if self.optimizer_device is not None and self.optimizer_device in self.i.swap_devices:
            pools.append(PlacedCopy(Copy.SWAP_BUFFERS, "fp32", _host(self.i.optimizer_pin_memory), Lifetime.AT_REST,
                                    Extent.SUB_GROUP, self.optimizer_device, tensors=self.i.optimizer_buffer_count,
                                    why="buffer_count buffers stream swap files"))
        if self.param_device is not None and self.param_device in self.i.swap_devices:
            pools.append(PlacedCopy(Copy.PARAM_SWAP_BUFFERS, self.i.compute_dtype, _host(self.i.param_pin_memory),
                                    Lifetime.AT_REST, Extent.UNIT, self.param_device,
                                    tensors=self.i.param_buffer_count,
                                    why="buffer_count buffers read partitions in swap files"))
        return pools

    def granularity(self) -> StepGranularity:
        if self.i.step_in_backward:
            return StepGranularity.IN_BACKWARD
        if self.optimizer_device is not None or self.i.stage == 3:
            return StepGranularity.SUB_GROUP
        return StepGranularity.ALL_AT_ONCE


def _host(pinned: bool) -> Location:
    return Location.HOST_PINNED if pinned else Location.HOST


def plan_for_config(config: ZeroConfig, *, world_size: int, accelerator: str,
                    swap_devices: frozenset[str] = frozenset({"nvme"})) -> PlacementPlan:
    """The plan of a loaded ds_config on `world_size` ranks computing on `accelerator` (a device type);
    `swap_devices`: the offload devices that keep copies in swap files (zero-offload's `nvme`, a plugin's)."""
    zero = config.zero_optimization
    optimizer, param = zero.offload_optimizer, zero.offload_param
    return build_plan(PlanInputs(
        stage=zero.stage, compute_dtype=config.compute_dtype, world_size=world_size, accelerator=accelerator,
        offload_optimizer=optimizer.device if optimizer is not None else "none",
        offload_param=param.device if param is not None else "none",
        optimizer_pin_memory=bool(optimizer is not None and optimizer.pin_memory),
        param_pin_memory=bool(param is not None and param.pin_memory), swap_devices=swap_devices,
        step_in_backward=bool(zero.step_in_backward),
        optimizer_buffer_count=optimizer.buffer_count if optimizer is not None else 1,
        param_buffer_count=param.buffer_count if param is not None else 1,
        param_max_in_cpu=param.max_in_cpu if param is not None else 0,
        optimizer_state_tensors=optimizer_state_tensors(config.optimizer.type if config.optimizer else None,
                                                        config.optimizer.params if config.optimizer else {}),
    ))
