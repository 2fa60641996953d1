"""Launching: `zero launch` (torchrun with deepspeed aliased to zero_core in the processes it starts), the
notebook opt-in `as_deepspeed()`, and local multi-rank runs for tests and `zero profile` (run_ranks)."""
from ._alias import DeepSpeedAlreadyImported, as_deepspeed
from ._command import LaunchError, add_launch_arguments, launch, launch_command
from ._local import DEFAULT_TIMEOUT, RanksFailed, free_port, run_ranks, started_ranks

__all__ = ["DEFAULT_TIMEOUT", "DeepSpeedAlreadyImported", "LaunchError", "RanksFailed", "add_launch_arguments",
           "as_deepspeed", "free_port", "launch", "launch_command", "run_ranks", "started_ranks"]
