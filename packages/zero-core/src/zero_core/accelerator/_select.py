"""Choosing the accelerator: DS_ACCELERATOR by name, or auto-detection by priority."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from zero_plugins import NamedRegistry, ZeroError

from . import _hookspecs
from .abstract import Accelerator

ENV_VAR = "DS_ACCELERATOR"

# No default: with DS_ACCELERATOR unset the accelerator is auto-detected by detect_priority.
accelerator_registry: NamedRegistry[Accelerator] = NamedRegistry(
    kind="accelerator", base=Accelerator, hookspecs=_hookspecs, hook_name="zero_register_accelerators",
    env_var=ENV_VAR)


class AcceleratorUnavailable(ZeroError):
    """DS_ACCELERATOR names an accelerator that cannot run here."""


@dataclass(frozen=True)
class Selection:
    accelerator: Accelerator
    reason: str


def select_accelerator() -> Selection:
    requested = accelerator_registry.requested_name()
    if requested is not None:
        cls = accelerator_registry.get(requested).cls
        usable, why = accelerator_registry.availability(cls)
        if not usable:
            raise AcceleratorUnavailable(
                f"{ENV_VAR}={requested} but it cannot run here: {why}; "
                f"unset {ENV_VAR} to auto-detect, or choose one of {', '.join(accelerator_registry.names())}"
            )
        return Selection(cls(), f"{ENV_VAR}={requested}")
    skipped: list[str] = []
    registrations = sorted(
        accelerator_registry.registrations().values(), key=lambda reg: (-reg.cls.detect_priority, reg.name)
    )
    for registration in registrations:
        usable, why = accelerator_registry.availability(registration.cls)
        if usable:
            detail = f"; skipped {'; '.join(skipped)}" if skipped else ""
            return Selection(registration.cls(), f"auto-detected ({ENV_VAR} unset){detail}")
        skipped.append(f"{registration.name}: {why}")
    raise AcceleratorUnavailable(f"no accelerator is usable: {'; '.join(skipped) or 'none registered'}")


_selected: Selection | None = None


def get_accelerator() -> Accelerator:
    """The process-wide accelerator, chosen on first call."""
    return get_selection().accelerator


def get_selection() -> Selection:
    global _selected
    if _selected is None:
        _selected = select_accelerator()
    return _selected


def set_accelerator(accelerator: Accelerator) -> None:
    """Use this accelerator from now on (as DeepSpeed's set_accelerator)."""
    global _selected
    _selected = Selection(accelerator, "set_accelerator()")


def reset_accelerator() -> None:
    """Forget the choice, so the next get_accelerator() reads DS_ACCELERATOR again."""
    global _selected
    _selected = None


@contextmanager
def using_accelerator(accelerator: Accelerator, reason: str) -> Iterator[None]:
    """Use this accelerator inside the block (a dry run's), then whatever was chosen before, or nothing yet."""
    global _selected
    previous, _selected = _selected, Selection(accelerator, reason)
    try:
        yield
    finally:
        _selected = previous
