"""The implementations of one of zero's hooks, to be called one by one.

zero calls each implementation of its hooks directly, handing it a callback tagged with
that plugin (`register`, `cli`), instead of calling the hook through pluggy. A hook
wrapper (`@hookimpl(wrapper=True)` or `@hookimpl(hookwrapper=True)`) would then never
run: calling its generator function only makes a generator. Such an implementation is
an error, reported when the hook's implementations are collected, never skipped silently.
"""
from __future__ import annotations

import pluggy

from ._distribution import provenance
from ._errors import PluginError


def plain_hookimpls(manager: pluggy.PluginManager, hook_name: str) -> list[pluggy.HookImpl]:
    """Every implementation of `hook_name`, in pluggy's order; PluginError if one is a wrapper."""
    caller: pluggy.HookCaller = getattr(manager.hook, hook_name)
    impls = caller.get_hookimpls()
    for impl in impls:
        if impl.wrapper or impl.hookwrapper:
            option = "wrapper=True" if impl.wrapper else "hookwrapper=True"
            raise PluginError(
                f"{provenance(manager, impl.plugin_name).label()} implements {hook_name} with "
                f"@hookimpl({option}), but zero calls each implementation of its hooks directly, "
                f"so a wrapper would never run; implement it as a plain hook: @hookimpl without {option}"
            )
    return impls
