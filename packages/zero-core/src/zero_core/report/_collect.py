"""Facts for `zero report`, each gathered without raising where a fact can be missing."""
from __future__ import annotations

import os
import platform
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import torch
import zero_pin
from zero_plugins import plugin_infos

from ..accelerator import accelerator_registry, get_selection


def python_facts() -> dict[str, str]:
    return {"version": platform.python_version(), "executable": sys.executable}


def torch_facts() -> dict[str, str | None]:
    return {
        "version": torch.__version__,
        "path": os.path.dirname(torch.__file__),
        "cuda": torch.version.cuda,
    }


def accelerator_facts() -> dict[str, Any]:
    """The chosen accelerator and why; raises the selection error for a bad DS_ACCELERATOR."""
    selection = get_selection()
    return {
        "selected": selection.accelerator.name,
        "reason": selection.reason,
        "memory_stats_source": selection.accelerator.memory_stats_source(),
        "accelerators": accelerator_registry.statuses(selected=selection.accelerator.name),
    }


def build_tool_facts() -> dict[str, str | None]:
    """What the native pin op needs to build: ninja, a C++ compiler and the Python headers."""
    compiler_names = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    compiler = next((path for path in map(shutil.which, compiler_names) if path), None)
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return {
        "ninja": shutil.which("ninja") or _pip_ninja(),
        "cxx_compiler": compiler,
        "python_headers": str(headers) if headers.exists() else None,
    }


def _pip_ninja() -> str | None:
    """The ninja binary of the pip package, which zero-pin uses when none is on PATH."""
    try:
        import ninja
    except ImportError:
        return None
    binary = Path(ninja.BIN_DIR) / "ninja"
    return str(binary) if binary.exists() else None


def pin_facts() -> dict[str, Any]:
    return {
        "backends": zero_pin.backend_statuses(),
        "memlock_limit": zero_pin.memlock_limit(),
        "native_op": zero_pin.native_build_state(),
    }


def plugin_facts() -> list[dict[str, object]]:
    return [info.as_dict() for info in plugin_infos()]
