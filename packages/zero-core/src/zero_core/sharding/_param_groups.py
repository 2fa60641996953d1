"""Which parameters the engine trains, in which optimizer param groups.

The groups come from the client optimizer if one is passed (as DeepSpeed does, its
`model_parameters` are then ignored), else from `model_parameters` (parameters, the
(name, parameter) pairs of `model.named_parameters()`, or param-group dicts of either), else
from the whole model. Parameters that do not require grad are frozen: they get no gradient,
no master copy and no optimizer state.
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
        raw = [_unnamed(item) for item in model_parameters]
        if all(isinstance(item, torch.Tensor) for item in raw):
            raw = [{"params": raw}]
        elif not all(isinstance(item, dict) for item in raw):
            raise ZeroError("model_parameters must hold parameters, (name, parameter) pairs or param-group dicts, "
                            "not a mix: pass model.parameters(), model.named_parameters() or a list of dicts")
    names = {id(p): name for name, p in module.named_parameters()}
    groups, seen = [], set()
    for index, group in enumerate(raw):
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else [_unnamed(item) for item in params]
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
        # torch keeps "param_names" for named parameters; they would not describe the flat copies the engine steps.
        groups.append(ParamGroup(trainable, {k: v for k, v in group.items() if k not in ("params", "param_names")}))
    missing = [name for name, p in module.named_parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ZeroError(f"parameters {shown} require grad but are in no param group, so they would never be "
                        "updated; add them to the optimizer or set requires_grad=False")
    return groups


def _unnamed(item: Any) -> Any:
    """The parameter of a (name, parameter) pair, as named_parameters() yields and torch's optimizers take (so
    does DeepSpeed 0.19); anything else as it is."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], torch.Tensor):
        return item[1]
    return item
