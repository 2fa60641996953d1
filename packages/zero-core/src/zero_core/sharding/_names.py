"""Parameters named by their fully qualified name (`transformer.h.0.attn.c_attn.weight`) in every message."""
from __future__ import annotations

import torch

_NAME_ATTRIBUTE = "_zero_name"


def name_parameters(module: torch.nn.Module) -> None:
    """Record each parameter's fully qualified name on it (a tied parameter keeps its first name)."""
    for name, param in module.named_parameters():
        setattr(param, _NAME_ATTRIBUTE, name)


def param_name(param: torch.Tensor) -> str:
    """The name `name_parameters` recorded, or the shape for a tensor the engine was never given."""
    name = getattr(param, _NAME_ATTRIBUTE, None)
    return name if isinstance(name, str) else f"<unnamed tensor of shape {tuple(param.shape)}>"
