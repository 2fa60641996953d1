"""The compute-dtype copy of one optimizer param group's trainable parameters, in one flat buffer.

Buckets (FlatLayouts) sit end to end in the buffer and every parameter's `.data` becomes a
view into it, so the model computes straight from the buffer and the all-gather after the
step writes straight into it: no second copy of the parameters ever exists.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from zero_plugins import Category

from ._home import DeviceHome, Home
from ._layout import FlatLayout


class FlatParams:
    """A FlatStorage whose every layout is replicated (whole on every rank)."""

    def __init__(
        self,
        layouts: Sequence[FlatLayout],
        dtype: torch.dtype,
        home: DeviceHome,
        category: Category = Category.PARAM_PERSISTENT,
    ) -> None:
        self.layouts = list(layouts)
        self._home = home
        self.starts: list[int] = []
        total = 0
        for layout in self.layouts:
            self.starts.append(total)
            total += layout.padded_numel
        # Zeros, so padding never carries garbage into norms or reductions.
        self.buffer = home.allocate(total, dtype, category)
        for layout, start in zip(self.layouts, self.starts):
            for slot in layout.slots:
                view = self.buffer[start + slot.offset : start + slot.offset + slot.numel].view(slot.shape)
                view.copy_(slot.param.data)
                slot.param.data = view

    def bucket(self, index: int) -> torch.Tensor:
        """The whole padded bucket, 1-D."""
        start = self.starts[index]
        return self.buffer[start : start + self.layouts[index].padded_numel]

    def owned(self, index: int, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of a bucket, 1-D."""
        start = self.starts[index]
        return self.buffer[start + lo : start + hi]

    def home(self, index: int) -> Home:
        return self._home

    def cast_from_master(self, index: int) -> bool:
        return False

    def commit(self, index: int) -> None:
        """Nothing to save: the flat buffers are memory."""

    def replicated(self) -> list[int]:
        return list(range(len(self.layouts)))
