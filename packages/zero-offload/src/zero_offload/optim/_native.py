"""The fused C++ op of the CPU optimizers (csrc/cpu_optim.cpp): built with ninja on first use,
through zero-pin's NativeOp, and cached under TORCH_EXTENSIONS_DIR by a hash of the source, the
flags, torch, Python and the CPU (it is compiled with -march=native for the machine that builds it).

ZERO_CPU_OPTIMIZER_KERNEL picks the kernels: unset, the fused op, or torch's kernels with a warning
(once per process) when it cannot build; `native`, the fused op or an error; `torch`, torch's
fused and foreach kernels, which need no build.
"""
from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from types import ModuleType

import torch
from zero_pin import NativeBuildError, NativeOp

from ._lists import StepLists

KERNEL_ENV = "ZERO_CPU_OPTIMIZER_KERNEL"
_CHOICES = ("native", "torch")

# -ffp-contract=off: no fma the source does not ask for, as torch's kernels are built, so that the
# vector loop and its scalar tail round alike. -fno-math-errno: sqrt never sets errno, so that it
# vectorizes (the results are the same). -fopenmp: torch's OpenMP team runs at::parallel_for.
CPU_OPTIM_OP = NativeOp(
    "cpu_optim.cpp", "zero_offload_cpu_optim_", "the fused CPU optimizer op",
    fallback=f"or set {KERNEL_ENV}=torch to step with torch's kernels",
    hint="run zero_offload.optim.build_cpu_optimizer_op(verbose=True) for the compiler output",
    csrc=Path(__file__).parent.parent / "csrc", headers=("cpu_optim_lanes.h",),
    cflags=("-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fno-math-errno"), ldflags=("-fopenmp",),
    cpu_specific=True, prebuild="call zero_offload.optim.build_cpu_optimizer_op()",
)

_warned = False
_warn_lock = threading.Lock()


def _choice() -> str:
    choice = os.environ.get(KERNEL_ENV, "").strip().lower()
    if choice and choice not in _CHOICES:
        raise ValueError(f"{KERNEL_ENV}={os.environ[KERNEL_ENV]!r} is not a kernel choice: "
                         f"use {' or '.join(_CHOICES)}, or unset it for the fused op with torch's as fallback")
    return choice


def cpu_optimizer_op() -> ModuleType | None:
    """The fused op, built on first use; None for torch's kernels (chosen, or the op cannot build,
    which warns once). With ZERO_CPU_OPTIMIZER_KERNEL=native a failed build raises NativeBuildError."""
    global _warned
    choice = _choice()
    if choice == "torch":
        return None
    try:
        return CPU_OPTIM_OP.load()
    except NativeBuildError as error:
        if choice == "native":
            raise
        with _warn_lock:
            if not _warned:
                _warned = True
                warnings.warn(f"zero_offload CPU optimizers step with torch's kernels, slower than the fused op "
                              f"(Lion 3-5x): {error}", RuntimeWarning, stacklevel=4)
        return None


def build_cpu_optimizer_op(verbose: bool = False) -> ModuleType:
    """Build the fused op now (or load the cached build), e.g. before the first step of a job; raises
    NativeBuildError naming what is missing."""
    return CPU_OPTIM_OP.load(verbose)


def cpu_optimizer_op_state() -> dict[str, str]:
    """{"state": "built" | "not built" | "cannot build" | "off", "detail": ...}; never builds."""
    if _choice() == "torch":
        return {"state": "off", "detail": f"{KERNEL_ENV}=torch: the optimizers step with torch's kernels"}
    return CPU_OPTIM_OP.state()


# The op's code for a param dtype; its states are fp32.
STORAGE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def native_arguments(lists: StepLists) -> tuple[list[list[int]], list[int]]:
    """The op's pointer lists (params, grads, then each state) and sizes. The op walks flat arrays
    of the param's size: every tensor is checked for that here, as a bad pointer would crash."""
    numels = [param.numel() for param in lists.params]
    kinds = [("param", lists.params), ("grad", lists.grads)] + [("state", kind) for kind in lists.states]
    pointers = []
    for what, tensors in kinds:
        for tensor, numel in zip(tensors, numels):
            if tensor.numel() != numel or not tensor.is_contiguous():
                raise ValueError(f"a {what} tensor of {list(tensor.shape)} does not fit its param of {numel} "
                                 "elements as a contiguous array (was a param's .data or state replaced?)")
        pointers.append([tensor.data_ptr() for tensor in tensors])
        if any(pointer == 0 for pointer, numel in zip(pointers[-1], numels) if numel):
            raise ValueError(f"a {what} tensor has no data (a fake or meta tensor?): the fused op reads and writes "
                             f"real memory; step real CPU tensors, or set {KERNEL_ENV}=torch")
    return pointers, numels
