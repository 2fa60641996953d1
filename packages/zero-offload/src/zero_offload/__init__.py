"""zero-offload: CPU and NVMe swappers for zero-core, and the CPU optimizers they step.

Exports load on first use (see zero_plugins.lazy_exports) so that loading the `zero` entry
point, which imports this package, does not import torch.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

from .__about__ import __version__

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export).
if TYPE_CHECKING:
    from .optim import CPUAdagrad as CPUAdagrad, CPUAdam as CPUAdam, CPULion as CPULion

__getattr__, __dir__, _exports = lazy_exports(__name__, __file__)
__all__ = ["__version__", *_exports]
