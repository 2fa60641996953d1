"""`zero profile`: measure a model's memory per phase at each ZeRO stage, beside the estimate, and explain the gaps.

`profile_engine(engine, train_step, batches)` does the measuring for a user's own engine and loop; the
CLI (`zero profile`) launches local ranks, builds a Hugging Face model from its config, and compares
with zero-estimate through the `zero_estimate_memory` hook (docs/profile.md). Exports load on first use.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

_EXPORTS = {
    "PHASES": "._phases",
    "ProfileRequest": "._request",
    "Setting": "._request",
    "compare": "._compare",
    "estimate_memory": "._estimator",
    "hf_train_step": "._phases",
    "profile_command": "._cli",
    "profile_engine": "._phases",
    "profile_html": "._html",
    "profile_text": "._text",
    "run_profile": "._run",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from ._cli import profile_command
    from ._compare import compare
    from ._estimator import estimate_memory
    from ._html import profile_html
    from ._phases import PHASES, hf_train_step, profile_engine
    from ._request import ProfileRequest, Setting
    from ._run import run_profile
    from ._text import profile_text

__all__ = ["PHASES", "ProfileRequest", "Setting", "compare", "estimate_memory", "hf_train_step", "profile_command",
           "profile_engine", "profile_html", "profile_text", "run_profile"]
