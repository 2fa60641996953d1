"""Build and load zero-pin's C++ ops (csrc/) with ninja through torch.utils.cpp_extension.

Two ops: `locked_block.cpp` (the native pin backend) and `counting_allocator.cpp` (the exact count
of torch's CPU allocator, see _host_allocator). Each build is cached under TORCH_EXTENSIONS_DIR
(torch's default cache when unset), in a folder named after a hash of everything the binary depends
on: the source, the flags, torch and Python (and the CPU, for an op built with -march=native). A
build is reused only where it fits, and two versions never overwrite each other. Other packages
build their ops with NativeOp too (zero-offload's fused CPU optimizers), from their own csrc.
torch is imported inside the methods so that `import zero_pin` stays light.
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

from zero_plugins import is_link

from ._errors import NativeBuildError

CSRC = Path(__file__).parent / "csrc"
CFLAGS = ("-O2",)


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
    """What a build needs and this machine lacks, each with how to get it."""
    if os.name != "posix":
        return ["a POSIX system (the ops use posix_memalign, mlock and c10's CPU allocator hook)"]
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


def cpu_fingerprint() -> str:
    """The CPU model and feature flags: what -march=native compiles for (the first core's, from
    /proc/cpuinfo on Linux; else the processor name)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")  # x86, then Arm's names
    first: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in wanted:
            first.setdefault(key.strip(), value.strip())
    return "\n".join(f"{key}: {value}" for key, value in sorted(first.items())) or platform.machine()


class NativeOp:
    """One C++ source built into one extension module on first use; a failed build is remembered.

    `csrc` is the folder of the source (zero-pin's by default) and of the `headers` it includes,
    which the cache key covers too; `cflags` and `ldflags` go to the compiler and linker;
    `cpu_specific` puts the CPU in the cache key, for flags such as -march=native; `prebuild` says
    how to build ahead of first use.
    """

    def __init__(self, source: str, prefix: str, what: str, fallback: str, hint: str, *, csrc: Path = CSRC,
                 headers: tuple[str, ...] = (), cflags: tuple[str, ...] = CFLAGS, ldflags: tuple[str, ...] = (),
                 cpu_specific: bool = False, prebuild: str = "run `zero pin build`") -> None:
        self.source = csrc / source
        self.headers = tuple(csrc / header for header in headers)
        self.prebuild = prebuild
        self.cflags = cflags
        self.ldflags = ldflags
        self.cpu_specific = cpu_specific
        self.prefix = prefix
        self.what = what  # "the native pin op", for messages
        self.fallback = fallback  # what to do without it, ends every error
        self.hint = hint  # where to look after a failed compile
        self._lock = threading.Lock()
        self._op: ModuleType | None = None
        self._failure: str | None = None  # why the build failed in this process, so status reports it

    def extension_name(self) -> str:
        import torch

        parts = [self.source.read_text(), *self.cflags, torch.__version__, sys.version, platform.machine()]
        parts += [header.read_text() for header in self.headers]
        if self.ldflags:
            parts += ["ldflags", *self.ldflags]
        if self.cpu_specific:
            parts.append(cpu_fingerprint())
        key = "\0".join(parts)
        return self.prefix + hashlib.sha256(key.encode()).hexdigest()[:12]

    def build_directory(self) -> Path:
        from torch.utils.cpp_extension import get_default_build_root

        return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / self.extension_name()

    def library_path(self) -> Path:
        return self.build_directory() / f"{self.extension_name()}.so"

    def _cannot_build_reason(self) -> str | None:
        if self._failure:
            return self._failure
        missing = missing_prerequisites()
        return f"{self.what} cannot build here: missing {'; '.join(missing)}" if missing else None

    def load(self, verbose: bool = False) -> ModuleType:
        """The op's module, built on first use; raises NativeBuildError saying what is missing."""
        with self._lock:
            if self._op is not None:
                return self._op
            reason = self._cannot_build_reason()  # also stops a failed compile from rerunning on every lookup
            if reason:
                raise NativeBuildError(f"{reason}; {self.hint + ', ' + self.fallback if self._failure else self.fallback}")
            from torch.utils.cpp_extension import load

            directory = self.build_directory()
            # torch writes build.ninja and the library there: a link would send those writes elsewhere
            if is_link(directory):
                raise NativeBuildError(f"{self.what}'s build directory {directory} is a symbolic link (to "
                                       f"{os.readlink(directory)}); remove the link (the op is rebuilt there), or set "
                                       "TORCH_EXTENSIONS_DIR to another directory")
            directory.mkdir(parents=True, exist_ok=True)
            try:
                self._op = load(name=self.extension_name(), sources=[str(self.source)], extra_cflags=list(self.cflags),
                                extra_ldflags=list(self.ldflags), build_directory=str(directory), verbose=verbose)
            except Exception as error:  # cpp_extension raises RuntimeError, OSError or ImportError
                # The compiler's first "error:" line says more than cpp_extension's summary.
                lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
                first_error = next((line for line in lines if "error:" in line), lines[0])
                self._failure = f"{self.what} failed to build in {directory}: {first_error}"
                raise NativeBuildError(f"{self._failure}; {self.hint}, {self.fallback}") from error
            return self._op

    def loaded(self) -> ModuleType | None:
        """The module if this process has loaded it, else None (never builds)."""
        return self._op

    def state(self) -> dict[str, str]:
        """{"state": "built" | "not built" | "cannot build", "detail": library path or reason}; never builds."""
        if self._op is not None:  # the library loaded, wherever TORCH_EXTENSIONS_DIR points now
            return {"state": "built", "detail": str(self._op.__file__)}
        if self.library_path().exists():
            return {"state": "built", "detail": str(self.library_path())}
        reason = self._cannot_build_reason()
        if reason:
            return {"state": "cannot build", "detail": reason}
        return {"state": "not built",
                "detail": f"builds into {self.build_directory()} at first use, or {self.prebuild}"}


LOCKED_BLOCK_OP = NativeOp("locked_block.cpp", "zero_pin_native_", "the native pin op",
                           fallback="or select DS_PIN_MEMORY_BACKEND=torch",
                           hint="run `zero pin build --verbose` for the compiler output")
COUNTING_ALLOCATOR_OP = NativeOp("counting_allocator.cpp", "zero_pin_counting_allocator_",
                                 "the CPU allocator count", fallback="measure on a GPU, where the caching "
                                 "allocator counts, or install the missing tools",
                                 hint="run `zero pin build --verbose` for the compiler output")
SOURCE = LOCKED_BLOCK_OP.source


def load_op(verbose: bool = False) -> ModuleType:
    """The native pin op's module (see LOCKED_BLOCK_OP)."""
    return LOCKED_BLOCK_OP.load(verbose)


def native_build_state() -> dict[str, str]:
    """The native pin op's build state (see NativeOp.state)."""
    return LOCKED_BLOCK_OP.state()
