"""Page-aligned host buffers for O_DIRECT, and the checks on tensors handed to a swap backend.

O_DIRECT moves data between the device and the buffer by DMA, so the buffer's address, the
file offset and the length must all be multiples of the device's logical block size (512 B
or 4 KiB). ALIGNMENT (4 KiB) satisfies every common device. A tensor whose byte length is
not a multiple of it is padded in the file: it occupies `padded_nbytes(nbytes)` bytes there.
"""
from __future__ import annotations

import ctypes

import torch
import zero_pin

from ._errors import SwapError, UnalignedBufferError

#: Alignment of buffers, file offsets and block sizes for O_DIRECT, in bytes.
ALIGNMENT = 4096

_FIX = ("allocate it with zero_offload.swap.aligned_empty(numel, dtype), or pin it with "
        "DS_PIN_MEMORY_BACKEND=native (zero_pin.pin_memory(t, make_copy=False) is page-aligned)")


def padded_nbytes(nbytes: int) -> int:
    """Bytes that `nbytes` of data occupy in a swap file: rounded up to ALIGNMENT."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def is_aligned(tensor: torch.Tensor) -> bool:
    return tensor.data_ptr() % ALIGNMENT == 0


def aligned_empty(numel: int, dtype: torch.dtype = torch.uint8, *, pin: bool = True) -> torch.Tensor:
    """An uninitialised 1-D CPU tensor whose memory starts on an ALIGNMENT boundary and spans a
    whole number of ALIGNMENT blocks (so a read or write of it needs no bounce buffer but the tail's).

    With `pin`, the memory comes from the selected pin backend (DS_PIN_MEMORY_BACKEND): the
    native backend's blocks are page-aligned and locked, and take exactly the padded bytes. The
    torch backend pins nothing without an accelerator; its memory, like any that is not pinned
    and page-aligned, is over-allocated by ALIGNMENT bytes and sliced at the first aligned
    address (so it stays pinned where it was pinned): it takes the padded bytes plus ALIGNMENT.
    """
    if numel < 0:
        raise SwapError(f"aligned_empty: numel must be >= 0 (got {numel})")
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = padded_nbytes(numel * itemsize) or ALIGNMENT
    raw = _allocate(nbytes, pin) if pin else None
    if raw is None or not (zero_pin.is_pinned(raw) and is_aligned(raw)):
        # Memory that is not the pin backend's page-aligned blocks: over-allocate and slice, always (not
        # only when unaligned by chance), so the bytes it takes are the same every time. The first try is
        # freed before: both alive at once made a peak of twice the buffer (a swap pool's, at initialize).
        raw = None
        raw = _allocate(nbytes + ALIGNMENT, pin)
        start = -raw.data_ptr() % ALIGNMENT
        raw = raw[start:start + nbytes]
    return raw[:numel * itemsize].view(dtype)


def _allocate(nbytes: int, pin: bool) -> torch.Tensor:
    # Born pinned (zero_pin.empty_pinned): no pageable temporary to pin.
    return zero_pin.empty_pinned(nbytes, torch.uint8) if pin else torch.empty(nbytes, dtype=torch.uint8)


def check_swappable(tensor: object, what: str) -> torch.Tensor:
    """The tensor as a swap buffer, or a SwapError naming what is wrong and the fix."""
    if not isinstance(tensor, torch.Tensor):
        raise SwapError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu" or tensor.layout != torch.strided or tensor.is_meta:
        raise SwapError(f"{what} reads and writes dense CPU tensors; this one is a {tensor.layout} tensor on "
                        f"{tensor.device}: copy it into a host buffer from aligned_empty() first")
    if not tensor.is_contiguous():
        raise SwapError(f"{what} needs a contiguous tensor (got shape {tuple(tensor.shape)}, stride "
                        f"{tuple(tensor.stride())}): copy it into a contiguous aligned buffer first")
    if tensor.numel() and not is_aligned(tensor):
        raise UnalignedBufferError(
            f"{what}: the tensor's memory at {tensor.data_ptr():#x} is not aligned to {ALIGNMENT} bytes, "
            f"which O_DIRECT requires; {_FIX}")
    return tensor


def check_offset(offset: int, what: str) -> None:
    if not isinstance(offset, int) or offset < 0 or offset % ALIGNMENT:
        raise UnalignedBufferError(
            f"{what}: file offset {offset!r} must be a non-negative multiple of {ALIGNMENT} (O_DIRECT); "
            "place tensors at padded_nbytes() boundaries")


def byte_view(tensor: torch.Tensor) -> memoryview:
    """A writable memoryview of the tensor's bytes (no copy). The tensor must outlive the view."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())).cast("B")
