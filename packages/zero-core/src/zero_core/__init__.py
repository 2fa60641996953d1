"""zero-core: ZeRO stages 0-3 over torch.distributed, accelerators, config and the memory ledger.

Exports load on first use (see zero_plugins.lazy_exports) so that loading the `zero`
entry point, which imports this package, does not import torch.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

from .__about__ import __version__

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export). The subpackages are reached as attributes
# after `import zero_core`, as DeepSpeed's are after `import deepspeed` (`deepspeed.zero.Init`, ...).
if TYPE_CHECKING:
    from . import (
        accelerator as accelerator,
        checkpointing as checkpointing,
        comm as comm,
        compression as compression,
        ops as ops,
        runtime as runtime,
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
        CheckpointError as CheckpointError,
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
        DeepSpeedEngine as DeepSpeedEngine,
        EngineMisuse as EngineMisuse,
        HalfAppliedStep as HalfAppliedStep,
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
        LiveCapWarning as LiveCapWarning,
    )

__getattr__, __dir__, _exports = lazy_exports(__name__, __file__)
__all__ = ["__version__", *_exports]
