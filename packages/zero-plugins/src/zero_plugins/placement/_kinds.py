"""The names a placement plan is written in: the copies of training state, where each lives, and when."""
from __future__ import annotations

import enum


class Location(str, enum.Enum):
    """Where a copy's bytes are; the value is the ledger's and the estimator's location name."""

    DEVICE = "device"  # the accelerator's memory (on the CPU accelerator, the same RAM as the host)
    HOST = "host"  # pageable host memory
    HOST_PINNED = "host.pinned"  # page-locked host memory: an end of device transfers
    NVME = "nvme"  # swap files

    def __str__(self) -> str:
        return self.value


class Lifetime(str, enum.Enum):
    """When a copy exists within one training step."""

    AT_REST = "at rest"  # from initialize on, between steps too
    DURING_GATHER = "during gather"  # while its module runs forward or backward (stage 3's gathered params)
    DURING_BACKWARD = "during backward"  # made by backward, gone once the step has read it
    AT_STEP = "at the step"  # made by the step and freed before it returns

    def __str__(self) -> str:
        return self.value


class Extent(str, enum.Enum):
    """How many elements a copy holds, as a share of the trainable parameters P on N ranks."""

    WHOLE = "P"  # every element, on every rank
    PARTITION = "P/N"  # this rank's partition
    BUCKET = "bucket"  # at most reduce_bucket_size elements at a time
    UNIT = "unit"  # the modules being gathered (stage3_max_live_parameters, prefetch)
    SUB_GROUP = "sub-group"  # one step sub-group at a time (sub_group_size, within one unit)
    SMALL = "small"  # stage 3's params of at most stage3_param_persistence_threshold elements, whole
    FROZEN = "F/N"  # this rank's partition of the frozen parameters

    def __str__(self) -> str:
        return self.value


class Copy(str, enum.Enum):
    """One copy of model state; the value names it in tables and JSON."""

    PARAMS_WHOLE = "16-bit params, whole"  # stages 0-2 (and fp32 compute's params)
    PARAMS_GATHERED = "params, gathered"  # stage 3's working set, cast from the partition or the master
    PARAM_PARTITION = "param partition"  # stage 3's compute-dtype shard kept between gathers
    PARAMS_PERSISTENT = "small params, whole"  # stage 3's params at or below the persistence threshold
    FROZEN_PARTITION = "frozen param partition"  # stage 3's frozen params (LoRA bases), which have no master
    MASTER = "fp32 master"
    GRAD_WHOLE = "gradients, whole"  # stages 0-1
    GRAD_BUCKET = "gradient reduce bucket"
    GRAD_PARTITION = "gradient partition"
    STEP_GRAD = "fp32 gradients for the step"  # a copy the step makes when the partition is not fp32 where it steps
    OPTIMIZER_STATE = "optimizer state"
    STEP_TEMPORARIES = "step temporaries"  # what the optimizer's kernels allocate while one call runs
    SWAP_BUFFERS = "swap buffers"  # the optimizer's: one swap slice each
    PARAM_SWAP_BUFFERS = "param swap buffers"  # stage 3's partitions in swap files are read into these

    def __str__(self) -> str:
        return self.value


class StepGranularity(str, enum.Enum):
    """How many elements one optimizer kernel call steps, which bounds its temporaries."""

    ALL_AT_ONCE = "every parameter in one call"  # torch's foreach over the whole partition
    SUB_GROUP = "one sub-group per call"  # sub_group_size elements, never across a unit
    IN_BACKWARD = "each sub-group as its gradient completes"  # step_in_backward

    def __str__(self) -> str:
        return self.value
