"""What a checkpoint may hold besides tensors: values torch's weights_only load rebuilds without running code.

Checked before a save writes anything, so a value that could only be loaded by running code (a lambda,
an object of the user's class, a numpy array, a generator) is refused at save time, naming its key,
instead of saving fine and failing, or running code, at every later load.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from zero_plugins import ZeroError

# Exactly the types torch.load(weights_only=True) rebuilds (checked against torch 2.13): subclasses are not.
_LEAVES: frozenset[type] = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray,
                                      torch.Size, torch.dtype, torch.device, torch.Tensor, torch.nn.Parameter})
_SEQUENCES: frozenset[type] = frozenset({list, tuple, set})
_MAPPINGS: frozenset[type] = frozenset({dict, OrderedDict})
# Deeper than this is a reference cycle or a structure no training state has; pickle would recurse until it fails.
_MAX_DEPTH = 64


def unstorable(value: Any, where: str, depth: int = 0) -> str | None:
    """Where in `value` (named from `where`, e.g. "client_state") the first value a checkpoint cannot hold is,
    and what it is; None when all of it can be stored."""
    kind = type(value)
    if depth > _MAX_DEPTH:
        return f"{where}: nested more than {_MAX_DEPTH} levels deep (a reference cycle?)"
    if kind in _LEAVES:
        return None
    if kind in _SEQUENCES:
        for index, item in enumerate(value):
            problem = unstorable(item, f"{where}[{index}]", depth + 1)
            if problem is not None:
                return problem
        return None
    if kind in _MAPPINGS:
        for key, item in value.items():
            problem = (unstorable(key, f"a key of {where}", depth + 1)
                       or unstorable(item, f"{where}[{key!r}]", depth + 1))
            if problem is not None:
                return problem
        return None
    return f"{where} is a {kind.__module__}.{kind.__qualname__}"


def check_client_state(client_state: Any) -> dict[Any, Any]:
    """`client_state` as save_checkpoint stores it, or one error naming the key that cannot be stored and the fix."""
    if client_state is None:
        return {}
    if type(client_state) not in _MAPPINGS:
        raise ZeroError(f"save_checkpoint(client_state=...) must be a dict (got a {type(client_state).__name__}); "
                        "wrap the value, e.g. client_state={'value': ...}")
    problem = unstorable(client_state, "client_state")
    if problem is not None:
        raise ZeroError(f"save_checkpoint: {problem}, which a checkpoint cannot hold: checkpoints store only what "
                        "loads without running code (tensors, numbers, strings, bytes, None, and lists, tuples, sets "
                        "and dicts of them); store its state instead (e.g. a numpy array as torch.from_numpy(a) "
                        "or a.tolist(), an object as its state_dict())")
    return dict(client_state)


def check_engine_state(state: dict[str, Any]) -> None:
    """The engine's own objects (scheduler, loss scaler, param groups): a user-given scheduler may hold anything."""
    problem = unstorable(state, "the training state")
    if problem is not None:
        raise ZeroError(f"save_checkpoint: {problem}, which a checkpoint cannot hold (it would load only by "
                        "running code); give the object a state_dict() of tensors, numbers and strings")
