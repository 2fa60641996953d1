"""Python imports this module at start-up in every process `zero launch` starts: the launcher puts this folder
first on their PYTHONPATH (zero_core.launch._command), and on no other process's.

It aliases deepspeed to zero_core (zero_core.launch._child), then runs the sitecustomize this one hides, if
there is one further along sys.path, as Python would have.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import PathFinder


def _same_folder(entry: str, folder: str) -> bool:
    return os.path.realpath(entry or os.curdir) == folder


def _run_hidden_sitecustomize(folder: str) -> None:
    spec = PathFinder.find_spec("sitecustomize", [entry for entry in sys.path if not _same_folder(entry, folder)])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # `import sitecustomize` later finds the one Python would have run
    spec.loader.exec_module(module)


def _start() -> None:
    folder = os.path.dirname(os.path.realpath(__file__))
    try:
        from zero_core.launch._child import start_launched_process
    except ImportError as error:  # another Python the program started, without zero_core: nothing to alias
        print(f"zero launch: {sys.executable} cannot import zero_core ({error}); deepspeed is not aliased in "
              f"process {os.getpid()}", file=sys.stderr)
    else:
        try:
            start_launched_process()
        finally:  # the hidden one runs even when this one fails, as it would without zero launch
            _run_hidden_sitecustomize(folder)
        return
    _run_hidden_sitecustomize(folder)


_start()
