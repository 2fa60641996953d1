"""Gathering past `stage3_max_live_parameters`: never refused, warned once per unit.

DeepSpeed's cap bounds only what is prefetched and kept; the module about to run is
always gathered. So does zero: a unit that cannot fit (larger than the cap on its own,
or beside the units of the modules running now) is gathered anyway, after every idle
unit was freed, and the first time each unit does so one warning names it, its size
and the cap that would have held it.
"""
from __future__ import annotations

import warnings

from ._unit import ParamUnit

KEY = "zero_optimization.stage3_max_live_parameters"


class LiveCapWarning(UserWarning):
    """A stage-3 unit was gathered beyond `zero_optimization.stage3_max_live_parameters`."""


class LiveCapWarnings:
    def __init__(self, max_live_numel: int) -> None:
        self.max_live_numel = max_live_numel
        self.warned: list[str] = []  # units gathered beyond the cap, in order (for reports and tests)

    def beyond_cap(self, unit: ParamUnit, in_use: int) -> None:
        """`unit` is gathered while `in_use` elements of running modules stay gathered, past the cap."""
        if unit.name in self.warned:
            return
        self.warned.append(unit.name)
        total = in_use + unit.numel
        if in_use == 0:
            what = f"has {unit.numel} elements, more than {KEY} ({self.max_live_numel}); it is gathered alone"
        else:
            what = (f"needs {unit.numel} elements gathered while {in_use} are in use by the modules running now, "
                    f"{total} in all, more than {KEY} ({self.max_live_numel}); it is gathered beyond the cap")
        warnings.warn(f"zero stage 3: {unit.name} {what}, as DeepSpeed does. Set {KEY} to at least {total} to keep "
                      "every gathered parameter within it", LiveCapWarning, stacklevel=3)
