"""The Hugging Face Trainer on zero's engine: `ZeroTrainer`, and `zero_init` for models partitioned as they load.

transformers and accelerate are optional dependencies of zero-core (`pip install "zero-core[transformers]"`);
importing this package without them is one ImportError that says so. Nothing else in zero_core imports them
(zero profile's model builder imports transformers inside a function). docs/integrations.md has the details.
"""
from importlib.util import find_spec

if missing := [name for name in ("transformers", "accelerate") if find_spec(name) is None]:
    raise ImportError(f"zero_core.integrations.transformers needs {' and '.join(missing)} (not installed here): "
                      "pip install transformers accelerate")

from ._auto_values import ZeroTrainerError, resolve_config  # noqa: E402 (after the check, which names the fix)
from ._trainer import ZeroTrainer, zero_init  # noqa: E402

__all__ = ["ZeroTrainer", "ZeroTrainerError", "resolve_config", "zero_init"]
