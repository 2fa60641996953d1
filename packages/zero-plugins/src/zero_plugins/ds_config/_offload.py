"""`zero_optimization.offload_param` and `offload_optimizer` (DeepSpeed's offload_config)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from .._ds_defaults import ds_defaults
from ._base import ConfigModel
from ._types import Bool, NonNegInt

# DeepSpeed's defaults, from zero_plugins' ds_defaults.json (which the estimator reads without pydantic).
_PARAM = ds_defaults("zero_optimization.offload_param")
_OPTIMIZER = ds_defaults("zero_optimization.offload_optimizer")


def _device_name(name: str) -> str:
    # DeepSpeed's "none", "cpu" and "nvme", or a plugin's device; which exist is known only at
    # initialize, where the offload-device registry lists them.
    if not re.fullmatch(r"[a-z][a-z0-9_.-]*", name):
        raise ValueError('must be "none", "cpu", "nvme" or another registered offload device\'s name')
    return name


OffloadDevice = Annotated[str, AfterValidator(_device_name)]


def _directory(path: str) -> str:
    # "" would be the working directory, and a NUL byte fails only when the swap files are made.
    if not path.strip():
        raise ValueError("must name a directory (got an empty string)")
    if "\x00" in path:
        raise ValueError("must not contain a NUL character")
    return path


NvmePath = Annotated[Path, BeforeValidator(lambda v: _directory(v) if isinstance(v, str) else v)]


class OffloadParamConfig(ConfigModel):
    """Where partitioned parameters live between uses (stage 3 only)."""

    device: OffloadDevice = _PARAM["device"]
    nvme_path: NvmePath | None = None
    buffer_count: NonNegInt = _PARAM["buffer_count"]
    buffer_size: NonNegInt = _PARAM["buffer_size"]
    max_in_cpu: NonNegInt = _PARAM["max_in_cpu"]
    pin_memory: Bool = _PARAM["pin_memory"]


class OffloadOptimizerConfig(ConfigModel):
    """Where optimizer state lives; the step runs on CPU for both "cpu" and "nvme"."""

    IGNORED = frozenset({"ratio", "super_offload", "cpuadam_cores_perc"})

    device: OffloadDevice = _OPTIMIZER["device"]
    nvme_path: NvmePath | None = None
    # Adam swaps 4 tensors per parameter (param, grad, m, v), hence DeepSpeed's 4.
    buffer_count: NonNegInt = _OPTIMIZER["buffer_count"]
    pin_memory: Bool = _OPTIMIZER["pin_memory"]
    pipeline_read: Bool = _OPTIMIZER["pipeline_read"]
    pipeline_write: Bool = _OPTIMIZER["pipeline_write"]
    fast_init: Bool = _OPTIMIZER["fast_init"]
