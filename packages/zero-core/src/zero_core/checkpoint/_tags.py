"""A checkpoint tag is a name inside save_dir, never a path: one rule for tags given to save and load, and for `latest`.

A tag becomes a directory name, so a tag with a separator, `..`, or an absolute path would reach
outside save_dir (a save publishes by renaming, and replaces what is there). Names starting with
"." are the save's own staging and replaced directories, and a name that differs from its
stripped self would save under one name and be looked up under another.
"""
from __future__ import annotations

import unicodedata

from zero_plugins import ZeroError

MAX_TAG_BYTES = 255  # a directory name's limit on Linux, macOS and Windows filesystems
_SEPARATORS = ("/", "\\")


def tag_problem(tag: object) -> str | None:
    """What makes `tag` not a valid checkpoint tag, or None."""
    if not isinstance(tag, str):
        return f"it is a {type(tag).__name__}, not a str"
    if not tag:
        return "it is empty"
    if any(separator in tag for separator in _SEPARATORS):
        return "it holds a path separator (a tag is one name inside save_dir, not a path)"
    if tag.startswith("."):
        return "it starts with '.' ('.', '..' and hidden names are not tags; zero's own staging names start with '.')"
    if tag != tag.strip():
        return "it starts or ends with whitespace"
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in tag):
        return "it holds a control character"
    if len(tag.encode("utf-8", "surrogatepass")) > MAX_TAG_BYTES:
        return f"it is longer than {MAX_TAG_BYTES} bytes"
    return None


def check_tag(tag: object, where: str) -> str:
    """`tag` if it is a valid tag; otherwise one error naming where it came from (`where`) and the rule."""
    problem = tag_problem(tag)
    if problem is not None:
        raise ZeroError(f"{where} {tag!r} is not a valid checkpoint tag: {problem}; a tag is a single directory name "
                        "of at most 255 bytes, without '/', '\\', control characters, surrounding whitespace or a "
                        "leading '.'")
    assert isinstance(tag, str)
    return tag
