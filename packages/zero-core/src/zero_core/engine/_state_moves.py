"""`engine.offload_states()` / `reload_states()`: the training state leaves the accelerator between phases
(an RLHF loop generates with another model, then trains again) and comes back, as in DeepSpeed.

Each storage on the accelerator is copied into a host tensor (pinned unless asked otherwise) and resized to
zero bytes; reloading resizes it and copies the bytes back. The storage object itself stays, so every view of
it (parameters of a flat buffer, `param.grad` views, the optimizer's references to its master tensors) is
valid again after the reload, with no pointer to repair. The ledger counts the bytes at `host.pinned` (or
`host`) while they are away, in their own category.

On the CPU accelerator the state already lives in host memory: nothing moves and the ledger is unchanged,
but the contract is the same (no training until `reload_states()`), so a loop tested on CPU behaves on CUDA.
The CUDA path is not exercised by this repository's tests, which run on CPU.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from zero_plugins import ZeroError

from ..memory import MemoryLedger, Placement
from ..sharding import ZeroOptimizer
from ..stage3 import unit_of


class OffloadStateType(str, enum.Enum):
    """DeepSpeed's `OffloadStateTypeEnum` values (its members compare equal to these strings)."""

    OPTIM_STATES = "optim_states"  # the torch optimizer's state (Adam's m and v)
    HP_PARAMS = "hp_params"  # the fp32 master (when it is a copy; with fp32 compute it is the weights)
    LP_PARAMS = "lp_params"  # the compute-dtype weights (stage 3: this rank's partitions)
    LP_GRADS = "lp_grads"  # gradients held between backward and step
    CONTIGUOUS_GRAD_BUFFER = "contiguous_grad_buffer"  # DeepSpeed's stage-3 reduce buffer; ours exist only in backward


def offload_state_types(include: Iterable[object] | None) -> frozenset[OffloadStateType]:
    """`include` as state types (None: all of them, DeepSpeed's default)."""
    if include is None:
        return frozenset(OffloadStateType)
    valid = {kind.value for kind in OffloadStateType}
    unknown = [str(name) for name in include if str(getattr(name, "value", name)) not in valid]
    if unknown:
        raise ZeroError(f"offload_states(include=...) got unknown state {unknown[0]!r}; use any of {sorted(valid)}")
    return frozenset(OffloadStateType(getattr(name, "value", name)) for name in include)


def engine_states(module: torch.nn.Module, optimizer: ZeroOptimizer) -> dict[OffloadStateType, list[torch.Tensor]]:
    """The tensors behind each state type (views included: their storages are what moves)."""
    weights: list[torch.Tensor] = []
    for param in module.parameters():
        unit = unit_of(param)
        weights.append(param if unit is None else unit.shard)
    optimizer_state = [value for state in optimizer.state.values() for value in state.values()
                       if isinstance(value, torch.Tensor)]
    masters = [tensor for group in optimizer.groups for tensor in group.master.in_memory()]
    return {
        OffloadStateType.OPTIM_STATES: optimizer_state,
        OffloadStateType.HP_PARAMS: masters,
        OffloadStateType.LP_PARAMS: weights,
        OffloadStateType.LP_GRADS: [tensor for group in optimizer.groups for tensor in group.grads.held()],
        OffloadStateType.CONTIGUOUS_GRAD_BUFFER: [],
    }


@dataclass
class _Moved:
    storage: torch.UntypedStorage
    host: torch.Tensor  # the bytes while the storage is empty


class StateMover:
    """The storages `offload_states` emptied, and which state types are away until `reload_states`."""

    def __init__(self, ledger: MemoryLedger, moves_from: str | None) -> None:
        """`moves_from`: the device type whose storages move to host memory (None: the state lives there already)."""
        self._ledger = ledger
        self._moves_from = moves_from
        self._moved: list[_Moved] = []
        self.away: frozenset[OffloadStateType] = frozenset()

    def offload(self, states: dict[OffloadStateType, list[torch.Tensor]], include: frozenset[OffloadStateType],
                *, pin_memory: bool, non_blocking: bool) -> int:
        """Move the storages of `include`'s tensors that are on an accelerator to host memory; returns the bytes moved.

        A state type sharing a storage with an included one is away too (with fp32 compute the master is the weights).
        """
        chosen = {_key(tensor.untyped_storage()) for kind in include for tensor in states[kind]}
        moved_before = {_key(entry.storage) for entry in self._moved}
        moved = 0
        for kind in include:
            for tensor in states[kind]:
                storage = tensor.untyped_storage()
                if storage.device.type != self._moves_from or _key(storage) in moved_before or storage.nbytes() == 0:
                    continue
                moved_before.add(_key(storage))
                moved += self._to_host(storage, pin_memory=pin_memory, non_blocking=non_blocking)
        self.away = self.away | include | {kind for kind, tensors in states.items()
                                           if any(_key(tensor.untyped_storage()) in chosen for tensor in tensors)}
        return moved

    def reload(self, *, non_blocking: bool) -> int:
        """Bring every moved storage back where it was; returns the bytes moved."""
        moved = 0
        for entry in self._moved:
            nbytes = entry.host.numel()
            entry.storage.resize_(nbytes)
            entry.storage.copy_(entry.host.untyped_storage(), non_blocking=non_blocking)
            self._ledger.relocate(entry.storage, Placement.DEVICE)
            moved += nbytes
        self._moved.clear()
        self.away = frozenset()
        return moved

    def _to_host(self, storage: torch.UntypedStorage, *, pin_memory: bool, non_blocking: bool) -> int:
        nbytes = storage.nbytes()
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin_memory)
        host.untyped_storage().copy_(storage, non_blocking=non_blocking)
        # The caching allocator orders a later reuse of these bytes after the copy on this stream.
        storage.resize_(0)
        self._ledger.relocate(storage, Placement.HOST, pinned=pin_memory)
        self._moved.append(_Moved(storage, host))
        return nbytes


def _key(storage: torch.UntypedStorage) -> int:
    return int(storage._cdata)
