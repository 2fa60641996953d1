"""Checkpoints: save and load an engine's whole training state at any world size and stage (docs/checkpoints.md)."""
from ._load import load_checkpoint
from ._save import save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
