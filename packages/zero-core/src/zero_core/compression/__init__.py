"""`deepspeed.compression`'s helpers that training scripts use (`helper.recursive_getattr`/`recursive_setattr`)."""
from . import helper

__all__ = ["helper"]
