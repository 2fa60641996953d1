"""Checkpoints: save and load an engine's whole training state at any world size and stage (docs/checkpoints.md)."""
from ._async import AsyncSaver
from ._cli import checkpoint_command
from ._export import export_checkpoint
from ._inspect import inspect_checkpoints
from ._load import load_checkpoint
from ._read import get_fp32_state_dict_from_zero_checkpoint
from ._save import begin_save, write_save

__all__ = ["AsyncSaver", "begin_save", "checkpoint_command", "export_checkpoint", "get_fp32_state_dict_from_zero_checkpoint", "inspect_checkpoints",
           "load_checkpoint", "write_save"]
