"""The directory an export writes: it never removes or replaces what an export did not write there.

An export lists the files it wrote in `zero_export.json`. A directory with that list is an earlier
export's: its listed files are replaced (a stale shard left beside new ones would be loaded with them),
and anything else there (a tokenizer the user added) is kept. A non-empty directory without it is
someone else's: it is refused unless the user passes `overwrite`, and then only the files this export
writes are replaced. Either way, a weights file this export would not replace (another model's shard or
index) is refused, since from_pretrained would load it beside, or instead of, the new weights.

The files are written into a staging directory beside OUT and swapped in whole (_export_swap.py), so a
link in OUT (a Hugging Face snapshot's files link into a shared cache) is replaced, never written through.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from zero_plugins import ZeroError, check_writable_directory, refuse_link, write_bytes_no_follow

from ._export_swap import MANIFEST, MARKER, listed, publish, reclaim, stage, undo

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
# What from_pretrained reads as a model's weights or index.
_WEIGHTS = re.compile(r"(model|pytorch_model|tf_model|flax_model)(-\d+-of-\d+)?\.(safetensors|bin|h5|msgpack)"
                      r"(\.index\.json)?")


class ExportDirectory:
    """OUT, checked before the checkpoint is read: `begin` makes the staging directory the files are written
    to, `finish` lists them and swaps it in, `abandon` removes it."""

    def __init__(self, path: Path, overwrite: bool) -> None:
        # OUT is renamed as a whole, so it must be a name: "." or "x/.." become the directory they name.
        absolute = Path(os.path.abspath(path))
        if not absolute.name:
            raise ZeroError(f"export OUT {path} is the filesystem root; pass a directory inside it")
        refuse_link(absolute, "export OUT", f"pass the directory it points to ({os.path.realpath(path)}), or another")
        if absolute.exists() and not absolute.is_dir():
            raise ZeroError(f"export OUT {path} is a file, not a directory; pass a directory (it is created if "
                            "needed)")
        _check_writable(absolute, path)
        self.path = path
        self._absolute = absolute
        self.staging = absolute  # until begin() makes the staging directory
        self.kept_config = False
        self._files: list[str] = []
        reclaim(absolute)  # what an export into OUT that was killed left
        entries = {entry.name for entry in absolute.iterdir()} if absolute.is_dir() else set()
        self._earlier = listed(absolute / MANIFEST) if MANIFEST in entries else None
        self._others = entries - set(self._earlier or ()) - {MANIFEST, MARKER}
        if self._earlier is None and self._others and not overwrite:
            raise ZeroError(f"export OUT {path} is not empty and was not written by an export (it holds "
                            f"{_some(self._others)}); choose an empty or new directory, or pass --overwrite "
                            "(overwrite=True) to write into it, replacing only the files the export writes")

    def begin(self, files: list[str]) -> None:
        """Refuse a foreign weights file that `files` would not replace, then make the staging directory."""
        foreign_weights = sorted(name for name in self._others - set(files) if _WEIGHTS.fullmatch(name))
        if foreign_weights:
            raise ZeroError(f"export OUT {self.path} holds {_some(foreign_weights)}, not written by an export and not "
                            "replaced by this one, which from_pretrained would load beside the new weights; move it "
                            "away, or choose another directory")
        self.staging = stage(self._absolute)
        self.kept_config = CONFIG_FILE in self._others and CONFIG_FILE not in files
        self._files = files

    def finish(self) -> None:
        """List the files written, then swap the staging directory in as OUT."""
        manifest = {"written_by": "zero checkpoint export", "files": self._files}
        write_bytes_no_follow(self.staging / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        publish(self.staging, self._absolute)

    def abandon(self) -> None:
        """(An export that failed or was interrupted) OUT as it was, the staging directory removed."""
        if self.staging != self._absolute:
            undo(self.staging, self._absolute)


def _check_writable(absolute: Path, given: Path) -> None:
    """One error naming OUT unless its staging directory can be made beside it (in the nearest directory that
    exists, where parents are missing): a read-only location is refused before the checkpoint is read."""
    existing = absolute.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ZeroError(f"export OUT {given}: {existing} is not a directory; pass a path in a directory")
    check_writable_directory(existing, "export OUT", given=given)


def _some(names: set[str] | list[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:3]) + (f" and {len(ordered) - 3} more" if len(ordered) > 3 else "")
