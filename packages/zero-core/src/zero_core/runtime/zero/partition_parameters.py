"""`deepspeed.runtime.zero.partition_parameters`: stage 3's names where DeepSpeed programs import them.

`Init`, `GatheredParameters` and `register_external_parameter` are zero's stage-3 classes
(docs/engine.md), `ZeroParamStatus` the status enum of stage-3 parameters.

Transformers' `prevent_arange_dtype_change` swaps `zero_wrapper_for_fp_tensor_constructor` for
one that leaves `_orig_torch_arange` alone. DeepSpeed's Init wraps torch's tensor constructors
with it to cast floating results to its compute dtype; zero's Init keeps the dtype torch gives
(the engine's fp32 master is cut from the parameters as built), so it wraps no constructor and
the swap changes nothing. The wrapper itself behaves as DeepSpeed's for code that calls it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from zero_plugins import ZeroError

from ...accelerator import get_accelerator
from ...stage3 import GatheredParameters, Init, ZeroParamStatus, register_external_parameter

__all__ = ["GatheredParameters", "Init", "ZeroParamStatus", "get_accelerator", "register_external_parameter",
           "zero_wrapper_for_fp_tensor_constructor"]

# torch's constructors as imported: transformers compares a wrapped function with this one (`fn is ...`).
_orig_torch_arange = torch.arange


def zero_wrapper_for_fp_tensor_constructor(fn: Callable[..., torch.Tensor], target_fp_dtype: torch.dtype | None,
                                           target_device: torch.device | None = None) -> Callable[..., torch.Tensor]:
    """`fn` creating its tensor on `target_device` unless the call names a device, with a floating result cast to
    `target_fp_dtype` (None: kept), as DeepSpeed's Init creates tensors."""
    if target_fp_dtype is not None and not (isinstance(target_fp_dtype, torch.dtype)
                                            and target_fp_dtype.is_floating_point):
        raise ZeroError(f"zero_wrapper_for_fp_tensor_constructor: target_fp_dtype is {target_fp_dtype!r}; give a "
                        "floating torch.dtype such as torch.bfloat16, or None to keep the dtype")

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") is None and target_device is not None:
            kwargs["device"] = target_device
        tensor = fn(*args, **kwargs)
        if target_fp_dtype is not None and tensor.is_floating_point():
            tensor.data = tensor.data.to(target_fp_dtype)
        return tensor

    return wrapped
