"""`zero_core.GatheredParameters`: whole partitioned parameters inside a `with` block.

For inspection, or for changing weights in place: with `modifier_rank` set, that rank's
values are broadcast when the block ends and every rank takes its shard of them (and
refreshes its fp32 master copy, if the engine keeps one). Every rank must enter the block
(it all-gathers). Parameters that are not partitioned pass through untouched, and `None` entries
are skipped, as in DeepSpeed (transformers passes a missing bias, in `resize_token_embeddings`).
"""
from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

import torch
from zero_plugins import ZeroError

from ._coordinator import owner_of
from ._unit import ParamUnit, unit_of


class GatheredParameters:
    def __init__(
        self,
        params: torch.nn.Parameter | Iterable[torch.nn.Parameter | None],
        modifier_rank: int | None = None,
        fwd_module: torch.nn.Module | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        """`fwd_module` is accepted for DeepSpeed compatibility and not needed here."""
        given = [params] if isinstance(params, torch.Tensor) else list(params)
        found = [param for param in given if param is not None]
        for param in found:
            if not isinstance(param, torch.Tensor):
                raise ZeroError(f"GatheredParameters takes parameters (or None, which it skips), got "
                                f"{type(param).__name__}")
        self._units: list[ParamUnit] = list({u: None for p in found if (u := unit_of(p)) is not None})
        if modifier_rank is not None and self._units:
            world = self._units[0].comm.world_size
            if not 0 <= modifier_rank < world:
                raise ZeroError(f"modifier_rank {modifier_rank} is outside 0..{world - 1}; pass a rank of the "
                                "process group, or None to only read")
        self._modifier = modifier_rank
        self._enabled = enabled
        self._gathered_here: list[ParamUnit] = []

    def __enter__(self) -> None:
        if not self._enabled:
            return
        for unit in self._units:
            coordinator = owner_of(unit)
            if coordinator is not None:
                coordinator.acquire(unit)
            elif not unit.gathered:  # a zero_core.Init unit, before any engine owns it
                unit.start_gather()
                self._gathered_here.append(unit)
            unit.wait()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self._enabled:
            return
        with torch.no_grad():
            for unit in self._units:
                if self._modifier is not None and kind is None:
                    assert unit.buffer is not None
                    unit.comm.broadcast(unit.buffer, self._modifier)
                    unit.store(unit.buffer)
                coordinator = owner_of(unit)
                if coordinator is not None:
                    coordinator.release(unit)
                elif unit in self._gathered_here:
                    unit.free()
        self._gathered_here.clear()
