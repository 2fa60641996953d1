"""Checkpoints: save and load an engine's whole training state at any world size and stage (docs/checkpoints.md).

Exports load on first use: torch.distributed.checkpoint (and DTensor, sympy, ... behind it) is
imported when a checkpoint is saved, loaded or read, not when the engine is.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export).
if TYPE_CHECKING:
    from ._arguments import add_checkpoint_arguments as add_checkpoint_arguments
    from ._async import AsyncSaver as AsyncSaver
    from ._cli import checkpoint_command as checkpoint_command
    from ._errors import CheckpointError as CheckpointError
    from ._export import (
        export_checkpoint as export_checkpoint,
        parse_size as parse_size,
        plan_shards as plan_shards,
    )
    from ._inspect import inspect_checkpoints as inspect_checkpoints
    from ._load import load_checkpoint as load_checkpoint
    from ._read import (
        SavedCheckpoint as SavedCheckpoint,
        get_fp32_state_dict_from_zero_checkpoint as get_fp32_state_dict_from_zero_checkpoint,
    )
    from ._save import begin_save as begin_save, write_save as write_save

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
