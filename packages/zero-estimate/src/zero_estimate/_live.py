"""Parameter counts of a live `torch.nn.Module` (torch is never imported here; the model brings it).

DeepSpeed counts `sum(dict((p.data_ptr(), p.numel()) ...))` so that tied weights count once.
That goes wrong in two cases, fixed here:
- meta-device models: every meta tensor has data_ptr() 0, so the whole model counts as one
  parameter;
- models already partitioned by ZeRO-3: a parameter's data is an empty placeholder (numel()
  0, shared or null pointers) and its real size is in `ds_numel`.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._errors import EstimateError


def full_numel(param: Any) -> int:
    """Elements of the whole parameter, also when this rank holds only a partition of it."""
    ds_numel = getattr(param, "ds_numel", None)
    return int(ds_numel) if ds_numel is not None else int(param.numel())


def dedup_key(param: Any) -> object:
    # Real storage: key by address, as DeepSpeed does, so two Parameter objects over one
    # storage (tied weights) count once. No real storage: the object itself is the identity.
    if param.is_meta or hasattr(param, "ds_numel") or param.numel() == 0:
        return ("object", id(param))
    # The storage's identity, not its address: a dry run's fake tensors have no address.
    return ("storage", str(param.device), param.untyped_storage()._cdata, param.storage_offset())


def unique_parameters(params: Iterable[Any]) -> dict[object, Any]:
    unique: dict[object, Any] = {}
    for param in params:
        unique[dedup_key(param)] = param
    return unique


def total_params(model: Any) -> int:
    total = sum(full_numel(p) for p in unique_parameters(model.parameters()).values())
    if total == 0:
        raise EstimateError("the model has no parameters; pass a model with parameters, or counts", "model")
    return total


def largest_layer_params(model: Any) -> int:
    """The most parameters one module owns directly (DeepSpeed's "largest layer")."""
    return max(sum(full_numel(p) for p in m.parameters(recurse=False)) for m in model.modules())


def require_module(model: object) -> None:
    if not (hasattr(model, "parameters") and hasattr(model, "modules")):
        raise EstimateError(
            f"expected a torch.nn.Module (got {type(model).__name__}); for counts use the *_all_cold function",
            "model",
        )
