"""The directory an export writes into: it never removes or replaces what an export did not write there.

An export lists the files it wrote in `zero_export.json`. A directory with that list is an earlier
export's: its listed files are replaced (a stale shard left beside new ones would be loaded with them),
and anything else there (a tokenizer the user added) is kept. A non-empty directory without it is
someone else's: it is refused unless the user passes `overwrite`, and then only the files this export
writes are replaced. Either way, a weights file this export would not replace (another model's shard or
index) is refused, since from_pretrained would load it beside, or instead of, the new weights.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from zero_plugins import ZeroError, read_config_text

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
MANIFEST = "zero_export.json"
# What from_pretrained reads as a model's weights or index.
_WEIGHTS = re.compile(r"(model|pytorch_model|tf_model|flax_model)(-\d+-of-\d+)?\.(safetensors|bin|h5|msgpack)"
                      r"(\.index\.json)?")


class ExportDirectory:
    """OUT, checked before the checkpoint is read: `begin` clears the way for the named files, `finish` lists them."""

    def __init__(self, path: Path, overwrite: bool) -> None:
        if path.exists() and not path.is_dir():
            raise ZeroError(f"export OUT {path} is a file, not a directory; pass a directory (it is created if "
                            "needed)")
        self.path = path
        self.kept_config = False
        self._files: list[str] = []
        entries = {entry.name for entry in path.iterdir()} if path.is_dir() else set()
        self._earlier = _listed(path / MANIFEST) if MANIFEST in entries else None
        self._others = entries - set(self._earlier or ()) - {MANIFEST}
        if self._earlier is None and self._others and not overwrite:
            raise ZeroError(f"export OUT {path} is not empty and was not written by an export (it holds "
                            f"{_some(self._others)}); choose an empty or new directory, or pass --overwrite "
                            "(overwrite=True) to write into it, replacing only the files the export writes")

    def begin(self, files: list[str]) -> None:
        """Make OUT, refuse a foreign weights file that `files` would not replace, remove the earlier export's rest."""
        foreign_weights = sorted(name for name in self._others - set(files) if _WEIGHTS.fullmatch(name))
        if foreign_weights:
            raise ZeroError(f"export OUT {self.path} holds {_some(foreign_weights)}, not written by an export and not "
                            "replaced by this one, which from_pretrained would load beside the new weights; move it "
                            "away, or choose another directory")
        self.path.mkdir(parents=True, exist_ok=True)
        for name in sorted(set(self._earlier or ()) - set(files)):
            stale = self.path / name  # the earlier export's, by its own list
            if stale.is_file() or stale.is_symlink():
                stale.unlink()
        self.kept_config = CONFIG_FILE in self._others and CONFIG_FILE not in files
        self._files = files

    def finish(self) -> None:
        (self.path / MANIFEST).write_text(json.dumps({"written_by": "zero checkpoint export", "files": self._files},
                                                     indent=2) + "\n", encoding="utf-8")


def _listed(manifest: Path) -> list[str]:
    """The plain file names an earlier export's list holds; one error if it is not such a list."""
    try:
        files = json.loads(read_config_text(manifest, what="export file list"))["files"]
    except (ZeroError, ValueError, KeyError, TypeError) as error:
        raise ZeroError(f"{manifest} is not an export's file list ({error}); move it away, or choose another "
                        "directory") from None
    if not isinstance(files, list) or not all(isinstance(f, str) and Path(f).name == f and f not in ("", ".", "..")
                                              for f in files):
        raise ZeroError(f"{manifest} is not an export's file list (it must list plain file names); move it away")
    return files


def _some(names: set[str] | list[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:3]) + (f" and {len(ordered) - 3} more" if len(ordered) > 3 else "")
