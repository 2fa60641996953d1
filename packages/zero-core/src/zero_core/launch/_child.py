"""What each Python process `zero launch` starts does first (run from _site/sitecustomize.py): alias deepspeed
to zero_core, and give the launched program DeepSpeed's `--local_rank=<n>` argument.

DeepSpeed's launcher starts each rank as `python -u program.py --local_rank=<n> args...`
(deepspeed/launcher/launch.py); torchrun passes the same arguments to every rank and sets LOCAL_RANK instead.
The launcher sets LOCAL_RANK_ARGUMENT for the ranks; the first process to start with it (the rank itself) takes it
out of its environment, so the processes the program starts in turn (data loader workers, tools) get no argument.
"""
from __future__ import annotations

import atexit
import os
import sys

from zero_plugins import ZeroError

from ._alias import install

LOCAL_RANK_ARGUMENT = "ZERO_LAUNCH_LOCAL_RANK_ARGUMENT"


class LaunchEnvironmentError(ZeroError, RuntimeError):
    """A launched process whose environment lacks what the launcher sets; the message names the variable."""


def start_launched_process() -> None:
    install()
    # Registered first, so it runs last: after the program's own exit hooks and an asynchronous save's.
    atexit.register(_tear_down_process_group)
    if os.environ.pop(LOCAL_RANK_ARGUMENT, None) is None:
        return
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None:
        raise LaunchEnvironmentError(
            f"{LOCAL_RANK_ARGUMENT} is set but LOCAL_RANK is not: the program was not started by torchrun under "
            f"zero launch; unset {LOCAL_RANK_ARGUMENT}, or start it with zero launch")
    # DeepSpeed's place: right after the program (sys.argv[0]), before the program's own arguments.
    sys.argv.insert(1, f"--local_rank={local_rank}")


def _tear_down_process_group() -> None:
    """A program that ends with its process group still up (most do: DeepSpeed-Chat's, the Trainer's) leaves gloo's
    threads to the interpreter's teardown, which aborts a rank now and then (SIGABRT, "terminate called without
    an active exception", about 1 exit in 10 on 2 CPU ranks); the launcher's processes end it here instead."""
    distributed = sys.modules.get("torch.distributed")  # a program that never imported it has nothing to end
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()
