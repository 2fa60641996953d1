"""`deepspeed.compression.helper`'s dotted-name helpers, with DeepSpeed's semantics: each dot is one
`getattr`, so they reach submodules, parameters and plain attributes alike (DeepSpeed-Chat's LoRA swaps
`nn.Linear` modules with them). A missing name raises AttributeError naming the full dotted path."""
from __future__ import annotations

from typing import Any


def recursive_getattr(model: Any, module_name: str) -> Any:
    """`model.a.b.c` for `module_name` "a.b.c"."""
    found = model
    for name in module_name.split("."):
        found = _step(found, name, module_name)
    return found


def recursive_setattr(model: Any, module_name: str, module: Any) -> None:
    """Set `model.a.b.c = module` for `module_name` "a.b.c" (through `__setattr__`, so an nn.Module registers it)."""
    *path, last = module_name.split(".")
    owner = model
    for name in path:
        owner = _step(owner, name, module_name)
    owner.__setattr__(last, module)


def _step(owner: Any, name: str, dotted: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError as error:
        raise AttributeError(f"{dotted!r}: {type(owner).__name__} has no attribute {name!r}") from error
