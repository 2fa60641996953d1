"""Hooks called by zero-offload's swap I/O."""
from __future__ import annotations

from collections.abc import Callable

from zero_plugins import hookspec


@hookspec
def zero_register_swap_backends(register: Callable[[str, type], None]) -> None:
    """Register swap-I/O backends with `register(name, cls)`, where cls subclasses
    zero_offload.swap.SwapBackend; ZERO_SWAP_BACKEND selects one by name (default `threads`).

    Import the classes inside the body: this hook runs whenever the registry is consulted
    (`zero swap check`, a backend being created), and the module implementing it is loaded
    by every `zero` command.
    """
