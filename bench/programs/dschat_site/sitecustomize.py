"""The test harness's patches for DeepSpeed-Chat's own incompatibilities with transformers 5, run at start-up in
every process of both runs (zero launch and real DeepSpeed): the harness puts this folder on PYTHONPATH.
Nothing here touches zero or DeepSpeed.

- dschat/utils/model/model_utils.py imports `no_init_weights` from transformers.modeling_utils; transformers 5
  moved it to transformers.initialization. It is added back to transformers.modeling_utils once that module loads.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

_PATCHED = "transformers.modeling_utils"


def _patch(module: ModuleType) -> None:
    from transformers.initialization import no_init_weights

    module.no_init_weights = no_init_weights  # type: ignore[attr-defined]


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of transformers.modeling_utils, so the patch applies when (and only if) it is imported."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != _PATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
