"""Gathering past `stage3_max_live_parameters`: never refused, warned once per engine.

DeepSpeed's cap bounds only what is prefetched and kept; the module about to run is
always gathered. So does zero: a unit that cannot fit (larger than the cap on its own,
or beside the units of the modules running now) is gathered anyway, after every idle
unit was freed. The first time, one warning names it, its size, how many other units are
larger than the cap on their own, and the cap that would have held them all: a model whose
every layer is above the cap (DeepSpeed-Chat's 3e7 at 7B) gets one line, not one per layer.
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
        self._too_large: list[ParamUnit] = []  # units above the cap on their own, largest first

    def adopt(self, units: list[ParamUnit]) -> None:
        above = [unit for unit in units if unit.numel > self.max_live_numel]
        self._too_large = sorted(self._too_large + above, key=lambda unit: -unit.numel)

    def beyond_cap(self, unit: ParamUnit, in_use: int) -> None:
        """`unit` is gathered while `in_use` elements of running modules stay gathered, past the cap."""
        if unit.name in self.warned:
            return
        self.warned.append(unit.name)
        if len(self.warned) > 1:
            return
        total = in_use + unit.numel
        if in_use == 0:
            what = f"has {unit.numel} elements, more than {KEY} ({self.max_live_numel}); it is gathered alone"
        else:
            what = (f"needs {unit.numel} elements gathered while {in_use} are in use by the modules running now, "
                    f"{total} in all, more than {KEY} ({self.max_live_numel}); it is gathered beyond the cap")
        others = [other for other in self._too_large if other is not unit]
        needed = max([total] + [other.numel for other in others])
        more = "" if not others else (f"; so are the {len(others)} other units larger than the cap on their own, up "
                                      f"to {others[0].name} ({others[0].numel} elements), without a further warning")
        warnings.warn(f"zero stage 3: {unit.name} {what}, as DeepSpeed does{more}. Set {KEY} to at least {needed} to "
                      "keep every gathered parameter within it", LiveCapWarning, stacklevel=3)
