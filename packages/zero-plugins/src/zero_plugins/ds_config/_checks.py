"""Rules that span keys or blocks, applied once the types are valid."""
from __future__ import annotations

from ._errors import ConfigError
from ._model import ZeroConfig
from ._params import OPTIMIZER_PARAMS, SCHEDULER_PARAMS, check_params


# What the `buffer_count` buffers of an NVMe offload block hold, and how many it takes.
_SWAP_BUFFERS = {
    "offload_param": "the parameter partitions are read into these buffers (DeepSpeed's default is 5)",
    "offload_optimizer": "the optimizer state is swapped through these buffers (Adam needs 3: the master and two "
                         "state tensors per sub-group; DeepSpeed's default is 4)",
}


def check_consistency(config: ZeroConfig) -> None:
    """Raise ConfigError for settings that are valid one by one but not together, and for bad optimizer
    and scheduler params (free-form blocks, checked by name here)."""
    if config.optimizer is not None:
        check_params("optimizer", config.optimizer.type, config.optimizer.params, OPTIMIZER_PARAMS)
    if config.scheduler is not None:
        check_params("scheduler", config.scheduler.type, config.scheduler.params, SCHEDULER_PARAMS)
    if config.fp16.enabled and config.bf16.enabled:
        raise ConfigError("bf16.enabled", "cannot be true while fp16.enabled is true; enable one of them")
    fp16 = config.fp16
    # DeepSpeed's dynamic scaler divides by the window and floors the scale at the minimum.
    if fp16.enabled and fp16.dynamic:
        if fp16.loss_scale_window <= 0:
            raise ConfigError(
                "fp16.loss_scale_window", f"must be > 0 with dynamic loss scaling (got {fp16.loss_scale_window})"
            )
        if fp16.min_loss_scale <= 0:
            raise ConfigError(
                "fp16.min_loss_scale", f"must be > 0 with dynamic loss scaling (got {fp16.min_loss_scale})"
            )
    zero = config.zero_optimization
    for name in ("offload_param", "offload_optimizer"):
        block = getattr(zero, name)
        if block is not None and block.device == "nvme" and block.nvme_path is None:
            raise ConfigError(
                f"zero_optimization.{name}.nvme_path",
                'is required when device is "nvme"; set it to a directory on the NVMe drive',
            )
        if block is not None and block.device == "nvme" and block.buffer_count == 0:
            raise ConfigError(f"zero_optimization.{name}.buffer_count",
                              f'must be >= 1 when device is "nvme": {_SWAP_BUFFERS[name]}')
    check_step_in_backward(config)


def check_step_in_backward(config: ZeroConfig) -> None:
    """`zero_optimization.step_in_backward` only where stepping each unit as its gradient completes gives the step
    that stepping them all at the end would: the global norm, a skipped step and accumulated micro-batches all
    need every gradient before the first update."""
    zero = config.zero_optimization
    if not zero.step_in_backward:
        return
    path = "zero_optimization.step_in_backward"
    if zero.stage != 3:
        raise ConfigError(path, f"needs stage 3 (got stage {zero.stage}); set zero_optimization.stage to 3, or "
                                "step_in_backward to false")
    if config.gradient_clipping > 0:
        raise ConfigError(path, f"cannot clip by the global norm (gradient_clipping is {config.gradient_clipping}), "
                                "which needs every gradient before the first unit steps; set gradient_clipping to "
                                "0, or step_in_backward to false")
    if config.fp16.enabled:
        raise ConfigError(path, "cannot skip an fp16 overflow step, which needs every gradient before the first "
                                "unit steps; use bf16, or set step_in_backward to false")
    for name in ("offload_optimizer", "offload_param"):
        block = getattr(zero, name)
        if block is not None and block.device != "none":
            raise ConfigError(path, f"steps on the device, and zero_optimization.{name} moves state off it; remove "
                                    f"{name}, or set step_in_backward to false")
    accumulation = config.gradient_accumulation_steps
    if accumulation is not None and accumulation > 1:
        raise ConfigError(path, f"steps each unit within its backward, before another micro-batch could add "
                                f"to its gradient, and gradient_accumulation_steps is "
                                f"{accumulation}; set it to 1, or step_in_backward to false")


def drop_offload_unused_by_stage(config: ZeroConfig) -> list[str]:
    """Clear the offload blocks the stage does not use, as DeepSpeed ignores them; returns their paths."""
    zero = config.zero_optimization
    dropped = []
    # Parameters are partitioned, and so can be offloaded, only at stage 3.
    if zero.stage < 3 and zero.offload_param is not None and zero.offload_param.device != "none":
        zero.offload_param = None
        dropped.append("zero_optimization.offload_param")
    # At stage 0 there is no ZeRO optimizer to move off the device.
    if zero.stage == 0 and zero.offload_optimizer is not None and zero.offload_optimizer.device != "none":
        zero.offload_optimizer = None
        dropped.append("zero_optimization.offload_optimizer")
    return dropped
