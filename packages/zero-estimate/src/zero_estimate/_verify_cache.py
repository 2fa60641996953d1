"""Dry-run measurements `zero plan --verify` keeps, so a second search does not trace a configuration again.

One JSON file per traced configuration, named by the SHA-256 of its key: the model's config (its contents, not
its name or path), the dry run's request (ds_config, world size, micro-batch, sequence length, checkpointing,
LoRA rank, attention, steps) and the versions of the installed zero-* distributions. What is kept is the
measurement, not the verdict, so other limits reuse it too. Files are read as JSON only, written whole under a
private name and renamed into place (zero_plugins.replace_file), never through a link.

The folder: $ZERO_PLAN_VERIFY_CACHE, else $XDG_CACHE_HOME/zero/plan-verify, else ~/.cache/zero/plan-verify.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zero_plugins import ConfigFileError, installed_zero_distributions, is_link, read_config_text, replace_file

from ._errors import EstimateError
from .__about__ import __version__

ENV = "ZERO_PLAN_VERIFY_CACHE"
SCHEMA = 1
# Request keys that change no measurement: where the model's file is (its contents are keyed), the trace's
# timeout, and the device's size (the verdict against it is made afresh each time).
_UNKEYED = ("model", "timeout", "device_memory")
# What a kept measurement must hold, with its type, to be used.
_MEASURED: dict[str, type | tuple[type, ...]] = {
    "gpu_peak": int, "gpu_peak_phase": str, "ranks": dict, "categories": dict, "host_peak": int,
    "seconds": (int, float)}


def cache_dir() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zero" / "plan-verify"


def cache_key(request: Mapping[str, Any], model_config: Mapping[str, Any]) -> str:
    keyed = {name: value for name, value in request.items() if name not in _UNKEYED}
    versions = {"zero-estimate": __version__, **installed_zero_distributions()}
    text = json.dumps({"schema": SCHEMA, "model_config": model_config, "request": keyed, "versions": versions},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerifyCache:
    """The measurements under `directory`; None: neither read nor written (--no-cache)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def check(self) -> None:
        """Refuse a folder that is a link (its files would be written wherever it points): before any trace."""
        if self.directory is not None and is_link(self.directory):
            raise EstimateError(f"the plan-verify cache folder {self.directory} is a symbolic link; point {ENV} at "
                                "a real folder, or pass --no-cache", "verify")

    def get(self, key: str) -> dict[str, Any] | None:
        """The measurement kept under `key`, or None if there is none; a damaged file is an error naming it."""
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json"
        if is_link(path):
            raise _damaged(path, "a symbolic link, which zero never writes")
        if not path.exists():
            return None
        try:
            entry = json.loads(read_config_text(path, what="plan-verify cache file"))
        except (ConfigFileError, ValueError, RecursionError) as error:
            raise _damaged(path, f"not JSON ({error})") from None
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("measured"), dict):
            raise _damaged(path, "not a measurement zero wrote under this name")
        measured: dict[str, Any] = entry["measured"]
        for name, kind in _MEASURED.items():
            if not isinstance(measured.get(name), kind) or isinstance(measured.get(name), bool):
                raise _damaged(path, f"its measured.{name} is missing or not a {_kind_name(kind)}")
        return measured

    def put(self, key: str, measured: Mapping[str, Any]) -> None:
        if self.directory is None:
            return
        self.check()
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"key": key, "measured": dict(measured)}, sort_keys=True, indent=1)
        replace_file(self.directory / f"{key}.json", data.encode("utf-8"))  # whole, and a link there is replaced


def _damaged(path: Path, why: str) -> EstimateError:
    return EstimateError(f"plan-verify cache file {path} is {why}; delete it (it is traced again), or pass "
                         f"--no-cache", "verify")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return "number" if isinstance(kind, tuple) else {int: "whole number", str: "string", dict: "object"}[kind]
