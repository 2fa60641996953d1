"""The ds_config: DeepSpeed's JSON config read with DeepSpeed's keys, aliases and defaults (no torch needed).

`load_config(path_or_dict, world_size=N)` is the entry point; docs/config.md lists every key.
"""
from ._activation import ActivationCheckpointingConfig, check_contiguous
from ._aio import AioConfig
from ._batch import resolve_batch_sizes
from ._checkpoint import CheckpointConfig, TagValidation
from ._errors import ConfigError, IgnoredConfigKeysWarning
from ._loader import keys_deepspeed_lacks, load_config, read_config_file
from ._model import ZeroConfig
from ._nonfinite import NonFiniteStepsConfig
from ._offload import OffloadDevice, OffloadOptimizerConfig, OffloadParamConfig
from ._optim import OptimizerConfig, SchedulerConfig
from ._precision import BF16Config, FP16Config
from ._zero import ZeroOptimizationConfig

__all__ = [
    "ActivationCheckpointingConfig",
    "AioConfig",
    "BF16Config",
    "CheckpointConfig",
    "ConfigError",
    "FP16Config",
    "IgnoredConfigKeysWarning",
    "NonFiniteStepsConfig",
    "OffloadDevice",
    "OffloadOptimizerConfig",
    "OffloadParamConfig",
    "OptimizerConfig",
    "SchedulerConfig",
    "TagValidation",
    "ZeroConfig",
    "ZeroOptimizationConfig",
    "read_config_file",
    "resolve_batch_sizes",
    "check_contiguous",
    "keys_deepspeed_lacks",
    "load_config",
]
