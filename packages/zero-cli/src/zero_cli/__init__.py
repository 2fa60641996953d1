"""The `zero` command line."""
from zero_plugins import CommandResult

from ._commands import CommandSet
from ._main import main
from .__about__ import __version__

__all__ = ["CommandResult", "CommandSet", "__version__", "main"]
