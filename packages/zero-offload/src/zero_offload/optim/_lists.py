"""The tensor lists one optimizer kernel call works on, and their split into bounded batches."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class StepLists:
    """Aligned lists: params[i], grads[i] and states[k][i] have one shape; steps[i] counts param i's steps.

    states holds one list per state tensor the optimizer keeps (Adam: exp_avg, exp_avg_sq[, max_exp_avg_sq]).
    """

    states: list[list[torch.Tensor]]
    params: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)
    steps: list[torch.Tensor] = field(default_factory=list)

    def append(self, param: torch.Tensor, grad: torch.Tensor, states: list[torch.Tensor], step: torch.Tensor) -> None:
        self.params.append(param)
        self.grads.append(grad)
        for kind, state in zip(self.states, states):
            kind.append(state)
        self.steps.append(step)

    def numel(self) -> int:
        return sum(param.numel() for param in self.params)


# One kernel call on StepLists with a param group's hyperparameters bound in.
Kernel = Callable[[StepLists], None]

# Elements per tile for work done in several passes: 1 MiB per fp32 tensor, so a tile's params,
# grads, states and temporaries stay in L2/L3 from the first pass to the last. Measured on a
# 2-core Xeon (1 MiB L2 per core): 2**16 to 2**20 within 15% of each other, twice as fast as whole
# tensors.
CACHE_TILE = 1 << 18

# Pieces of a param start at multiples of this many elements, a multiple of every SIMD width
# (AVX-512: 16 fp32 or 32 bf16 lanes). torch's vector loops and scalar tails round differently,
# so only this keeps the tail where an uncut param has it, and the results bit-identical.
_CUT_ALIGN = 64


def batches(lists: StepLists, limit: int, piece_limit: int | None = None) -> Iterator[StepLists]:
    """Flat views of `lists` in batches of at most `limit` elements, each view at most `piece_limit`:
    large tensors are cut into pieces, small ones share a batch. All tensors must be contiguous;
    both limits multiples of _CUT_ALIGN."""
    piece_limit = piece_limit or limit
    batch, room = StepLists([[] for _ in lists.states]), limit
    for index, param in enumerate(lists.params):
        flats = [param.view(-1), lists.grads[index].view(-1)] + [kind[index].view(-1) for kind in lists.states]
        start, numel = 0, param.numel()
        while start < numel:
            length = min(room, piece_limit, numel - start)
            if length < numel - start:
                length -= length % _CUT_ALIGN
            if length:
                param_piece, grad_piece, *state_pieces = (flat.narrow(0, start, length) for flat in flats)
                batch.append(param_piece, grad_piece, state_pieces, lists.steps[index])
                start, room = start + length, room - length
            if room == 0 or (room < _CUT_ALIGN and start < numel):
                yield batch
                batch, room = StepLists([[] for _ in lists.states]), limit
    if batch.params:
        yield batch
