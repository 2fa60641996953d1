"""The torch optimizer that steps the fp32 master: from the config, or the client's, re-pointed.

Config names follow DeepSpeed: `Adam` is AdamW (decoupled weight decay) unless
`adam_w_mode: false`, `AdamW` is AdamW, `SGD` is SGD, and any other torch.optim class is
found by name. Adam's weight decay defaults to 0, as in DeepSpeed's fused Adam (torch's
AdamW would default to 0.01). DeepSpeed-only kernel switches (`torch_adam`,
`fp32_optimizer_states`) are accepted and have nothing to switch: the step is torch's.

When the optimizer state is offloaded, the offload device supplies a CPU optimizer for the
config's type (zero-offload's CPUAdam, CPUAdagrad, CPULion), as DeepSpeed picks
DeepSpeedCPUAdam; it takes DeepSpeed's CPU-optimizer arguments (`adamw_mode`, `bias_correction`).
`torch_adam: true` keeps torch's optimizer there too, as in DeepSpeed.
"""
from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from zero_plugins import ZeroError

from zero_plugins.ds_config import ConfigError

if TYPE_CHECKING:
    from zero_plugins.ds_config import OptimizerConfig

_KERNEL_SWITCHES = ("torch_adam", "fp32_optimizer_states")
OptimizerFactory = Callable[[list[dict[str, Any]]], torch.optim.Optimizer]
CpuOptimizers = Callable[[str], "type[torch.optim.Optimizer] | None"]


def build_optimizer(
    config: OptimizerConfig | None,
    client: torch.optim.Optimizer | OptimizerFactory | None,
    groups: list[dict[str, Any]],
    cpu_optimizers: CpuOptimizers | None = None,
) -> torch.optim.Optimizer:
    """`groups` are param-group dicts whose "params" are the master tensors; `cpu_optimizers` names
    the offload device's CPU optimizer for a config type, when the optimizer state is offloaded."""
    if isinstance(client, torch.optim.Optimizer):
        if config is not None:
            warnings.warn("a client optimizer was passed, so the config's optimizer block is ignored (as in DeepSpeed)",
                          stacklevel=3)
        return _repoint(client, groups)
    if client is not None:
        if not callable(client):
            raise ZeroError(f"optimizer must be a torch.optim.Optimizer or a callable (got {type(client).__name__})")
        optimizer = client(groups)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ZeroError(f"the optimizer callable returned {type(optimizer).__name__}, not a torch.optim.Optimizer")
        return optimizer
    if config is None:
        # none given or configured: DeepSpeed's inference engine, which the engine never lets step (forward_only);
        # SGD without momentum keeps no state
        return torch.optim.SGD(groups, lr=0.0)
    cpu_class = cpu_optimizers(config.type.lower()) if cpu_optimizers is not None else None
    if cpu_class is not None and config.params.get("torch_adam") is not True:  # DeepSpeed's switch back to torch
        return cpu_class(groups, **_cpu_arguments(config, cpu_class))
    cls, kwargs = _from_config(config)
    return cls(groups, **kwargs)


def _cpu_arguments(config: OptimizerConfig, cls: type[torch.optim.Optimizer]) -> dict[str, Any]:
    """The config's params as DeepSpeed's CPU optimizers take them (`adam_w_mode` is their `adamw_mode`)."""
    params = dict(config.params)
    if "max_grad_norm" in params:
        raise ConfigError("optimizer.params.max_grad_norm", "is not an optimizer parameter; set gradient_clipping instead")
    params.pop("torch_adam", None)
    if config.type.lower() in ("adam", "adamw"):
        adamw_mode = params.pop("adam_w_mode", True)
        params["adamw_mode"] = True if config.type.lower() == "adamw" else adamw_mode
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "params", "model_params")]
    for key in params:
        if key not in accepted:
            raise ConfigError(f"optimizer.params.{key}",
                              f"is not a parameter of {cls.__module__}.{cls.__name__}, which steps the offloaded "
                              f"optimizer state (it takes {', '.join(accepted)})")
    if isinstance(params.get("betas"), list):
        params["betas"] = tuple(params["betas"])
    return params


def _repoint(optimizer: torch.optim.Optimizer, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    # DeepSpeed's way: keep the client's object (its hyperparameters, and any scheduler built on
    # it, stay valid) and swap each group's parameters for the master tensors.
    for target, group in zip(optimizer.param_groups, groups):
        target["params"] = group["params"]
    return optimizer


def _from_config(config: OptimizerConfig) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    name = config.type.lower()
    params = dict(config.params)
    if "max_grad_norm" in params:
        raise ConfigError("optimizer.params.max_grad_norm", "is not an optimizer parameter; set gradient_clipping instead")
    if name in ("adam", "adamw"):
        adam_w_mode = params.pop("adam_w_mode", True)
        for switch in _KERNEL_SWITCHES:
            params.pop(switch, None)
        if params.pop("bias_correction", True) is not True:
            raise ConfigError("optimizer.params.bias_correction", "false is not supported (torch's Adam always corrects)")
        cls: type[torch.optim.Optimizer] = torch.optim.AdamW if name == "adamw" or adam_w_mode else torch.optim.Adam
        params.setdefault("weight_decay", 0.0)
    else:
        found = _torch_optimizers()
        if name not in found:
            raise ConfigError("optimizer.type", f"unknown optimizer {config.type!r}; use Adam, AdamW, SGD or another "
                              "torch.optim class by name")
        cls = found[name]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "params")]
    for key in params:
        if key not in accepted:
            raise ConfigError(f"optimizer.params.{key}",
                              f"is not a parameter of torch.optim.{cls.__name__} (it takes {', '.join(accepted)})")
    if isinstance(params.get("betas"), list):
        params["betas"] = tuple(params["betas"])
    return cls, params


def _torch_optimizers() -> dict[str, type[torch.optim.Optimizer]]:
    """torch.optim's optimizer classes by lower-case name (DeepSpeed's fallback for other type names)."""
    classes = (getattr(torch.optim, name) for name in dir(torch.optim))
    return {
        cls.__name__.lower(): cls
        for cls in classes
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer
    }
