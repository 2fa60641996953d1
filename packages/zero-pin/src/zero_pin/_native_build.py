"""Build and load the native op (csrc/locked_block.cpp) with ninja through torch.utils.cpp_extension.

The build is cached under TORCH_EXTENSIONS_DIR (torch's default cache when unset), in a folder
named after a hash of everything the binary depends on: the source, the flags, torch and
Python. A build is reused only where it fits, and two versions never overwrite each other.
torch is imported inside the functions so that `import zero_pin` stays light.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType

from ._errors import NativeBuildError

SOURCE = Path(__file__).parent / "csrc" / "locked_block.cpp"
CFLAGS = ("-O2",)
FALLBACK = "or select DS_PIN_MEMORY_BACKEND=torch"
HINT = f"run `zero pin build --verbose` for the compiler output, {FALLBACK}"

_lock = threading.Lock()
_op: ModuleType | None = None
_failure: str | None = None  # why the build failed in this process, so status reports it


def extension_name() -> str:
    import torch

    key = "\0".join([SOURCE.read_text(), *CFLAGS, torch.__version__, sys.version, platform.machine()])
    return "zero_pin_native_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def build_directory() -> Path:
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / extension_name()


def library_path() -> Path:
    return build_directory() / f"{extension_name()}.so"


def _find_pip_ninja() -> None:
    """cpp_extension runs `ninja` from PATH, where the pip package's binary is only once its
    environment is activated; append that folder (as a last resort) so `.venv/bin/python` builds."""
    try:
        import ninja
    except ImportError:
        return
    path = os.environ.get("PATH", "")
    if ninja.BIN_DIR not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join(filter(None, [path, ninja.BIN_DIR]))


def missing_prerequisites() -> list[str]:
    """What the build needs and this machine lacks, each with how to get it."""
    if os.name != "posix":
        return ["a POSIX system (the op uses posix_memalign and mlock)"]
    from torch.utils.cpp_extension import get_cxx_compiler, is_ninja_available

    _find_pip_ninja()
    missing = []
    compiler: str = get_cxx_compiler()  # unannotated in torch: mypy.ini's untyped_calls_exclude
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ({compiler!r} is not on PATH: install g++ or set CXX)")
    if not is_ninja_available():
        missing.append("ninja (pip install ninja)")
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        missing.append("the Python headers (Python.h: install python3-dev)")
    return missing


def _cannot_build_reason() -> str | None:
    if _failure:
        return _failure
    missing = missing_prerequisites()
    return f"the native pin op cannot build here: missing {'; '.join(missing)}" if missing else None


def load_op(verbose: bool = False) -> ModuleType:
    """The op's module, built on first use; raises NativeBuildError saying what is missing."""
    global _op, _failure
    with _lock:
        if _op is not None:
            return _op
        reason = _cannot_build_reason()  # also stops a failed compile from rerunning on every lookup
        if reason:
            raise NativeBuildError(f"{reason}; {HINT if _failure else FALLBACK}")
        from torch.utils.cpp_extension import load

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        try:
            _op = load(name=extension_name(), sources=[str(SOURCE)], extra_cflags=list(CFLAGS),
                       build_directory=str(directory), verbose=verbose)
        except Exception as error:  # cpp_extension raises RuntimeError, OSError or ImportError
            # The compiler's first "error:" line says more than cpp_extension's summary.
            lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
            first_error = next((line for line in lines if "error:" in line), lines[0])
            _failure = f"the native pin op failed to build in {directory}: {first_error}"
            raise NativeBuildError(f"{_failure}; {HINT}") from error
        return _op


def native_build_state() -> dict[str, str]:
    """{"state": "built" | "not built" | "cannot build", "detail": library path or reason}; never builds."""
    if _op is not None:  # the library loaded, wherever TORCH_EXTENSIONS_DIR points now
        return {"state": "built", "detail": str(_op.__file__)}
    if library_path().exists():
        return {"state": "built", "detail": str(library_path())}
    reason = _cannot_build_reason()
    if reason:
        return {"state": "cannot build", "detail": reason}
    return {"state": "not built", "detail": f"builds into {build_directory()} at first use, or run `zero pin build`"}
