"""zero-core: ZeRO stages 0-3 over torch.distributed, accelerators, config and the memory ledger.

Exports load on first use (see zero_plugins.lazy_exports) so that loading the `zero`
entry point, which imports this package, does not import torch.
"""
import importlib
from typing import TYPE_CHECKING, Any

from zero_plugins import lazy_exports

from .__about__ import __version__

_EXPORTS = {
    "Accelerator": ".accelerator",
    "get_accelerator": ".accelerator",
    "set_accelerator": ".accelerator",
    "StorageTracker": ".memory",
    "MemoryLedger": ".memory",
    "MemoryReport": ".memory",
    "see_memory_usage": ".accelerator",
    "initialize": ".engine",
    "add_config_arguments": ".engine",
    "init_distributed": ".comm",
    "CollectiveFailed": ".comm",
    "NonFiniteStepsError": ".engine",
    "RankMismatch": ".engine",
    "EngineMisuse": ".engine",
    "ZeroEngine": ".engine",
    "ZeroOptimizer": ".engine",
    "load_config": "zero_plugins.ds_config",
    "ConfigError": "zero_plugins.ds_config",
    "ZeroConfig": "zero_plugins.ds_config",
    "IgnoredConfigKeysWarning": "zero_plugins.ds_config",
    "get_fp32_state_dict_from_zero_checkpoint": ".checkpoint",
    "Init": ".stage3",
    "GatheredParameters": ".stage3",
    "HeldParametersWarning": ".stage3",
}

_export, _dir = lazy_exports(__name__, _EXPORTS)
# Subpackages reached as attributes after `import zero_core`, as DeepSpeed's are after `import deepspeed`
# (`deepspeed.zero.Init`, `deepspeed.comm.get_rank()`, `deepspeed.utils.zero_to_fp32`, ...).
_SUBPACKAGES = ("accelerator", "checkpointing", "comm", "utils", "zero")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    return _export(name)


def __dir__() -> list[str]:
    return sorted({*_dir(), *_SUBPACKAGES})


if TYPE_CHECKING:  # `name as name` is mypy's explicit re-export; it reads no computed __all__
    from . import (
        accelerator as accelerator,
        checkpointing as checkpointing,
        comm as comm,
        utils as utils,
        zero as zero,
    )
    from .accelerator import (
        Accelerator as Accelerator,
        get_accelerator as get_accelerator,
        see_memory_usage as see_memory_usage,
        set_accelerator as set_accelerator,
    )
    from .checkpoint import (
        get_fp32_state_dict_from_zero_checkpoint as get_fp32_state_dict_from_zero_checkpoint,
    )
    from .comm import CollectiveFailed as CollectiveFailed, init_distributed as init_distributed
    from zero_plugins.ds_config import (
        ConfigError as ConfigError,
        IgnoredConfigKeysWarning as IgnoredConfigKeysWarning,
        ZeroConfig as ZeroConfig,
        load_config as load_config,
    )
    from .engine import (
        EngineMisuse as EngineMisuse,
        NonFiniteStepsError as NonFiniteStepsError,
        RankMismatch as RankMismatch,
        ZeroEngine as ZeroEngine,
        ZeroOptimizer as ZeroOptimizer,
        add_config_arguments as add_config_arguments,
        initialize as initialize,
    )
    from .memory import (
        MemoryLedger as MemoryLedger,
        MemoryReport as MemoryReport,
        StorageTracker as StorageTracker,
    )
    from .stage3 import (
        GatheredParameters as GatheredParameters,
        HeldParametersWarning as HeldParametersWarning,
        Init as Init,
    )

__all__ = ["__version__", *_EXPORTS, *_SUBPACKAGES]
