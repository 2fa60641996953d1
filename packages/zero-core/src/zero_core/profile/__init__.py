"""`zero profile`: measure a model's memory per phase at each ZeRO stage, beside the estimate, and explain the gaps.

`profile_engine(engine, train_step, batches)` does the measuring for a user's own engine and loop; the
CLI (`zero profile`) launches local ranks, builds a Hugging Face model from its config, and compares
with zero-estimate through the `zero_estimate_memory` hook (docs/profile.md). Exports load on first use.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export).
if TYPE_CHECKING:
    from ._arguments import add_profile_arguments as add_profile_arguments
    from ._cli import profile_command as profile_command
    from ._compare import compare as compare
    from ._estimator import estimate_memory as estimate_memory
    from ._html import profile_html as profile_html
    from ._phases import PHASES as PHASES, hf_train_step as hf_train_step, profile_engine as profile_engine
    from ._request import ProfileRequest as ProfileRequest, Setting as Setting
    from ._run import run_profile as run_profile
    from ._text import profile_text as profile_text
    from ._verify import verify_candidate as verify_candidate

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
