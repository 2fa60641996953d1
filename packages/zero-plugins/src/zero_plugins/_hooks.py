"""The implementations of one of zero's hooks, to be called one by one.

zero calls each implementation of its hooks directly, handing it a callback tagged with
that plugin (`register`, `cli`), instead of calling the hook through pluggy. A hook
wrapper (`@hookimpl(wrapper=True)` or `@hookimpl(hookwrapper=True)`) would then never
run: calling its generator function only makes a generator. Such an implementation is
an error, reported when the hook's implementations are collected, never skipped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pluggy

from ._distribution import Provenance, provenance
from ._errors import PluginError, PluginHookError, ZeroError, raised_at


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


@dataclass(frozen=True)
class PluginHook:
    """One plugin's implementation of one hook, called as zero calls every hook: directly, by keyword.

    What it raises is re-raised as a PluginHookError naming the plugin, with the original chained; a
    ZeroError passes unchanged, for it is a refusal of the user's input (an estimator refusing a setting,
    a registry refusing a duplicate name) that already says what to fix.
    """

    manager: pluggy.PluginManager
    impl: pluggy.HookImpl
    hook_name: str

    @property
    def plugin(self) -> Provenance:
        return provenance(self.manager, self.impl.plugin_name)

    def __call__(self, **kwargs: Any) -> Any:
        try:
            return self.impl.function(**kwargs)
        except ZeroError:
            raise
        except Exception as error:
            origin = self.plugin
            raise PluginHookError(f"{origin.label()} raised {error!r} in its {self.hook_name} hook"
                                  f"{raised_at(error)}; {origin.remedy()}") from error


def plugin_hooks(manager: pluggy.PluginManager, hook_name: str) -> list[PluginHook]:
    """Each plugin's implementation of `hook_name`, to call one by one (plain_hookimpls' checks made)."""
    return [PluginHook(manager, impl, hook_name) for impl in plain_hookimpls(manager, hook_name)]
