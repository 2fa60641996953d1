"""Gathered buffers that outlived their gather because user code still holds a tensor into them.

`param.data` or a view of a gathered parameter aliases its unit's buffer. When `Init` moves
on to another unit it stores and frees the buffer; a tensor still aliasing it (the
`dst` of `dst.weight.data.copy_(src.weight.data)`, taken before `src` was gathered) then
points into memory the unit no longer reads. A write through it is written back to the
unit ("write-through"), which is exact as long as the unit has not changed since; once it
has, the alias holds outdated values and using it is an error.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ._unit import ParamUnit


@dataclass
class StaleBuffer:
    unit: ParamUnit
    storage: weakref.ref[torch.UntypedStorage]
    numel: int
    dtype: torch.dtype
    version: int  # the unit's version the buffer holds

    def tensor(self) -> torch.Tensor | None:
        """The whole padded flat buffer, or None once nothing holds it any more."""
        storage = self.storage()
        if storage is None:
            return None
        return torch.empty(0, dtype=self.dtype, device=storage.device).set_(storage, 0, (self.numel,), (1,))

    def param_at(self, tensor: torch.Tensor) -> torch.nn.Parameter:
        """The parameter whose slot `tensor` (an alias of this buffer) starts in."""
        offset = tensor.storage_offset()
        slots = self.unit.layout.slots
        return next((s.param for s in slots if s.offset <= offset < s.offset + s.numel), slots[-1].param)


class StaleBuffers:
    def __init__(self) -> None:
        self._by_address: dict[int, StaleBuffer] = {}

    def add(self, stale: StaleBuffer) -> None:
        storage = stale.storage()
        if storage is not None:
            self._by_address[storage.data_ptr()] = stale

    def among(self, tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, StaleBuffer]]:
        """The tensors that alias a stale buffer, each with its buffer."""
        if not self._by_address:
            return []
        self._by_address = {address: s for address, s in self._by_address.items() if s.storage() is not None}
        found = []
        for tensor in tensors:
            if tensor.layout is not torch.strided:  # sparse and other layouts have no single storage
                continue
            stale = self._by_address.get(tensor.untyped_storage().data_ptr())
            if stale is not None:
                found.append((tensor, stale))
        return found
