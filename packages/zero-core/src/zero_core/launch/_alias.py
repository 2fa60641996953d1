"""`import deepspeed` as zero_core, in one process: a finder at the front of sys.meta_path.

- `deepspeed.X.Y` resolves to `zero_core.X.Y`, the same module object (`deepspeed.zero is zero_core.zero`), so
  isinstance checks and module state are shared, and nothing is imported twice.
- A `deepspeed.*` path zero_core lacks is one ModuleNotFoundError that names both paths.
- importlib.metadata finds a `deepspeed` distribution (_distribution.py) before any installed one.
- Nothing happens until `install()` runs: `zero launch`'s processes run it at start-up (_site/sitecustomize.py),
  a notebook through `as_deepspeed()`; every other process sees no alias.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from importlib.abc import Loader
from importlib.machinery import ModuleSpec, PathFinder
from importlib.metadata import Distribution, DistributionFinder, distributions
from types import ModuleType

from zero_plugins import ZeroError

from ..__about__ import __version__ as ZERO_VERSION
from ._distribution import NAME, ZeroAsDeepSpeed, is_deepspeed_name

TARGET = "zero_core"


class DeepSpeedAlreadyImported(ZeroError, RuntimeError):
    """The real DeepSpeed was imported before the alias was installed; the message says how to start over."""


def target_name(fullname: str) -> str | None:
    """`zero_core.X.Y` for `deepspeed.X.Y`; None for any other module (`deepspeed_foo` included)."""
    if fullname == NAME or fullname.startswith(NAME + "."):
        return TARGET + fullname[len(NAME):]
    return None


class _AliasLoader(Loader):
    """Hands the import system the zero_core module itself, so the alias and the target are one object."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._own_spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # importlib has just set `__spec__` to the alias's spec (it keeps the module's other attributes): the
        # module keeps its own, so zero_core.X still says it is zero_core.X.
        module.__spec__ = self._own_spec


class DeepSpeedAlias(DistributionFinder):
    """The finder: module specs for `deepspeed.*`, and the `deepspeed` distribution."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        name = target_name(fullname)
        if name is None:
            return None
        try:
            own = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent of `name` is a module, not a package
            own = None
        if own is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: in this process deepspeed is zero_core (zero launch), and zero_core "
                f"has no {name}; the DeepSpeed names zero answers are listed in docs/engine.md (\"DeepSpeed's calls\")",
                name=fullname)
        return ModuleSpec(fullname, _AliasLoader(name), origin=own.origin,
                          is_package=own.submodule_search_locations is not None)

    def find_distributions(self, context: DistributionFinder.Context = DistributionFinder.Context()
                           ) -> Iterable[Distribution]:
        if context.name is not None and not is_deepspeed_name(context.name):
            return ()
        return (ZeroAsDeepSpeed(),)


def installed() -> bool:
    return any(isinstance(finder, DeepSpeedAlias) for finder in sys.meta_path)


def install() -> bool:
    """Put the finder first on sys.meta_path; False if it was there already. Refuses a process that has
    imported the real DeepSpeed already: its modules would stay beside zero's."""
    if installed():
        return False
    loaded = sys.modules.get(NAME)
    if loaded is not None:
        raise DeepSpeedAlreadyImported(
            f"deepspeed is imported already in this process (from {getattr(loaded, '__file__', None)}), so it "
            f"cannot become zero_core; call zero_core.launch.as_deepspeed() before anything imports deepspeed "
            f"(in a notebook: restart the kernel and make it the first cell)")
    sys.meta_path.insert(0, DeepSpeedAlias())
    return True


def installed_deepspeed_note(where: str) -> str | None:
    """One line saying that an installed DeepSpeed is set aside `where`; None if none is installed."""
    spec = PathFinder.find_spec(NAME)  # sys.path alone: the alias, if installed here, is not asked
    if spec is None:
        return None
    versions = [dist.version for dist in distributions(name=NAME) if not isinstance(dist, ZeroAsDeepSpeed)]
    version = f" {versions[0]}" if versions else ""
    location = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    return (f"zero launch: DeepSpeed{version} is installed ({location}); {where}, `import deepspeed` is zero_core "
            f"{ZERO_VERSION} instead")


def as_deepspeed() -> None:
    """`import deepspeed` (and every `deepspeed.*` module) is zero_core from now on, in this process only: the
    one-line opt-in for a notebook or an interactive session. Says so once where DeepSpeed is installed too."""
    if install():
        note = installed_deepspeed_note("in this process")
        if note is not None:
            print(note, file=sys.stderr)
