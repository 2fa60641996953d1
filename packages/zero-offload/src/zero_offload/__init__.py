"""zero-offload: CPU and NVMe swappers for zero-core, and the CPU optimizers they step.

Exports load on first use (see zero_plugins.lazy_exports) so that loading the `zero` entry
point, which imports this package, does not import torch.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

from .__about__ import __version__

_EXPORTS = {
    "CPUAdam": ".optim",
    "CPUAdagrad": ".optim",
    "CPULion": ".optim",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # `name as name` is mypy's explicit re-export; it reads no computed __all__
    from .optim import CPUAdagrad as CPUAdagrad, CPUAdam as CPUAdam, CPULion as CPULion

__all__ = ["__version__", *_EXPORTS]
