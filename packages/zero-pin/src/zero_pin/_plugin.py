"""Hook implementations of zero-pin, loaded through the `zero` entry point; imports no torch at module level."""
from __future__ import annotations

from typing import Callable

from zero_plugins import CommandTable, hookimpl


@hookimpl
def zero_register_pin_backends(register: Callable[[str, type], None]) -> None:
    # The built-ins register through the same entry point as any third party's backend.
    from ._native_backend import NativeBackend
    from ._torch_backend import TorchBackend

    register("torch", TorchBackend)
    register("native", NativeBackend)


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    from . import _cli

    cli.add_command("pin", help="build the native pin op, or check the pin backends and memlock limit",
                    add_arguments=_cli.add_arguments, run=_cli.run)
