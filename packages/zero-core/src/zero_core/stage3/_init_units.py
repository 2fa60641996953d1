"""The units `zero_core.Init` makes, and the ones it holds gathered while the block runs.

A module's parameters become a unit when its construction returns. Code that runs later
(a Hugging Face `post_init`, a parent's `__init__` re-initialising a child) reaches them
through `InitMode`, which asks `gather` for their units: the units held so far are stored
and freed, and the new ones gathered whole, so a rank holds one module's parameters at a
time (a call that reads several modules' parameters holds them all for that call).
Storing broadcasts the buffer from rank 0 first: ranks may have drawn different random
weights, and an eagerly built model also starts from rank 0's (`initialize` broadcasts).
Every rank must make the same calls, since gathering and storing are collectives.
"""
from __future__ import annotations

import time
import weakref

import torch

from ..comm import Collectives
from ..memory import MemoryLedger
from ..sharding import DeviceHome
from ._ds_attributes import mark_persistent
from ._init_agreement import InitAgreement
from ._init_stale import StaleBuffer, StaleBuffers
from ._partition import Partitions
from ._unit import ParamUnit, unit_of


class InitUnits:
    def __init__(self, comm: Collectives, ledger: MemoryLedger, device: torch.device, threshold: int) -> None:
        """`threshold`: parameters of at most this many elements stay whole (persistent at stage 3)."""
        self._comm = comm
        self._ledger = ledger
        self._device = device
        self._threshold = threshold
        self._partitions = Partitions(DeviceHome(device, ledger))  # the engine places them when it takes them over
        self._versions: weakref.WeakKeyDictionary[ParamUnit, int] = weakref.WeakKeyDictionary()  # stores so far
        self._held: list[ParamUnit] = []
        self.stale = StaleBuffers()
        self.agreement = InitAgreement(comm, device)

    def partition(self, module: torch.nn.Module) -> None:
        """Partition `module`'s own parameters that are still whole and above the threshold."""
        self.partition_params(type(module).__name__, [p for p in module._parameters.values() if p is not None])

    def partition_params(self, name: str, params: list[torch.nn.Parameter], *, assigned: bool = False) -> None:
        """Partition those of `params` that are still whole and above the threshold, as unit `name` (one per dtype).

        `assigned`: the values were assigned by the caller (loaded weights, _init_meta.py), who still holds them.
        """
        whole = list(dict.fromkeys(p for p in params if unit_of(p) is None))
        mark_persistent(p for p in whole if p.numel() <= self._threshold)  # DeepSpeed's ds_id etc. (persistent)
        params = [p for p in whole if p.numel() > self._threshold]
        if not params:
            return
        self.agreement.unit(name, params)  # before the broadcasts that a different model would mismatch
        with torch.no_grad():
            for param in params:
                if self._comm.world_size > 1:
                    if assigned and self._comm.rank != 0:
                        # a loaded tensor may view a private mapping of the checkpoint: writing rank 0's values
                        # into it would copy its pages, which stay until the whole file is closed
                        param.data = torch.empty_like(param.data)
                    self._comm.broadcast(param.data)
        storages = [weakref.ref(p.data.untyped_storage()) for p in params]
        for dtype in dict.fromkeys(p.dtype for p in params):
            same = [p for p in params if p.dtype == dtype]
            unit = ParamUnit(name, same, self._comm, dtype=dtype, ledger=self._ledger, device=self._device,
                             partitions=self._partitions)
            self._versions[unit] = 0
        if not assigned:  # the caller holds assigned tensors anyway: waiting for gloo to drop them gains nothing
            _await_release(storages)

    def is_ours(self, unit: ParamUnit) -> bool:
        return unit in self._versions

    def managed(self, param: torch.Tensor) -> ParamUnit | None:
        """The unit of `param` if Init made it and nobody else (GatheredParameters, the engine) has it gathered."""
        unit = unit_of(param) if isinstance(param, torch.nn.Parameter) else None
        if unit is None or not self.is_ours(unit) or (unit.gathered and unit not in self._held):
            return None
        return unit

    def gather(self, units: list[ParamUnit]) -> None:
        """Hold `units` gathered, storing and freeing every other unit held."""
        if not units:
            return
        for unit in [u for u in self._held if u not in units]:
            self._store_and_free(unit)
        for unit in units:
            if not unit.gathered:
                unit.start_gather()
                unit.wait()
                self._held.append(unit)

    def flush(self) -> None:
        """Store and free every unit held."""
        for unit in list(self._held):
            self._store_and_free(unit)

    def release(self) -> None:
        """Free every unit held without storing it (the block failed; ranks may be out of step)."""
        for unit in self._held:
            if unit.gathered:
                unit.free()
        self._held.clear()

    def is_current(self, stale: StaleBuffer) -> bool:
        """The stale buffer holds the unit's latest values, and the unit is not gathered into another one."""
        return self._versions.get(stale.unit) == stale.version and not stale.unit.gathered

    def write_through(self, stales: list[StaleBuffer]) -> None:
        """Store what a call wrote into stale buffers as their units' new values."""
        for stale in stales:
            buffer = stale.tensor()
            assert buffer is not None, "the call's own argument keeps the buffer alive"
            self._store(stale.unit, buffer)
            stale.version = self._versions[stale.unit]

    def _store_and_free(self, unit: ParamUnit) -> None:
        self._held.remove(unit)
        if not unit.gathered:  # the engine took it over (initialize inside the block)
            return
        buffer = unit.buffer
        assert buffer is not None
        numel, dtype = buffer.numel(), buffer.dtype
        self._store(unit, buffer)
        del buffer
        storage = unit.free()
        if self._comm.world_size > 1:
            _await_release([storage])
        # a tensor the caller still holds into the buffer: its writes must reach the unit
        self.stale.add(StaleBuffer(unit, storage, numel, dtype, self._versions[unit]))

    def _store(self, unit: ParamUnit, buffer: torch.Tensor) -> None:
        with torch.no_grad():
            if self._comm.world_size > 1:
                self._comm.broadcast(buffer)
            unit.store(buffer)
        self._versions[unit] += 1


def _await_release(storages: list[weakref.ref[torch.UntypedStorage]], timeout: float = 1.0) -> None:
    """Give gloo a moment to drop the whole parameters it broadcast.

    gloo's worker thread releases a communicated tensor shortly after the call returns; until
    it does, the module's whole parameters stay alive and would overlap the next module's,
    breaking the bound of one whole module at a time. The wait is bounded: a caller that
    still holds a whole parameter itself only delays the build by `timeout`.
    """
    deadline = time.monotonic() + timeout
    while any(ref() is not None for ref in storages) and time.monotonic() < deadline:
        time.sleep(0.0005)
