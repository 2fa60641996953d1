"""Hooks called by zero-pin."""
from __future__ import annotations

from typing import Callable

from zero_plugins import hookspec


@hookspec
def zero_register_pin_backends(register: Callable[[str, type], None]) -> None:
    """Register pin backends with `register(name, cls)`, where cls subclasses zero_pin.PinBackend.

    Import the classes inside the body: this hook runs whenever the registry is consulted
    (a backend name not resolved yet in this process, `zero pin check`, `zero report`), and
    the module implementing it is loaded by every `zero` command.
    """
