"""Which parameters the engine trains, in which optimizer param groups.

The groups come from the client optimizer if one is passed (as DeepSpeed does, its
`model_parameters` are then ignored), else from `model_parameters` (parameters or
param-group dicts), else from the whole model. Parameters that do not require grad are
frozen: they get no gradient, no master copy and no optimizer state.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from zero_plugins import ZeroError


@dataclass
class ParamGroup:
    params: list[torch.nn.Parameter]
    options: dict[str, Any] = field(default_factory=dict)


def resolve_param_groups(
    module: torch.nn.Module, model_parameters: Iterable[Any] | None, client_optimizer: torch.optim.Optimizer | None
) -> list[ParamGroup]:
    if client_optimizer is not None:
        if len(client_optimizer.state) > 0:
            raise ZeroError("the client optimizer already has state (it has stepped); pass a fresh optimizer")
        raw: list[Any] = list(client_optimizer.param_groups)
    elif model_parameters is None:
        raw = [{"params": list(module.parameters())}]
    else:
        raw = list(model_parameters)
        if all(isinstance(item, torch.Tensor) for item in raw):
            raw = [{"params": raw}]
        elif not all(isinstance(item, dict) for item in raw):
            raise ZeroError("model_parameters must hold either parameters or param-group dicts, not a mix")
    names = {id(p): name for name, p in module.named_parameters()}
    groups, seen = [], set()
    for index, group in enumerate(raw):
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        trainable = []
        for param in params:
            if id(param) not in names:
                raise ZeroError(f"param group {index} holds a tensor of shape {tuple(param.shape)} that is not "
                                "a parameter of the model; pass only the model's parameters")
            if id(param) in seen:
                raise ZeroError(f"parameter {names[id(param)]} appears in more than one param group")
            seen.add(id(param))
            if param.requires_grad:
                trainable.append(param)
        groups.append(ParamGroup(trainable, {k: v for k, v in group.items() if k != "params"}))
    missing = [name for name, p in module.named_parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ZeroError(f"parameters {shown} require grad but are in no param group, so they would never be "
                        "updated; add them to the optimizer or set requires_grad=False")
    return groups


def frozen_params(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if not p.requires_grad]
