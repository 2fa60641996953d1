"""zero_plugins._safe_paths: what zero writes or deletes never goes through a symbolic link.

Each test puts a link to a file or directory outside the target where zero writes or deletes, and
checks the outside file is exactly as it was.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from zero_plugins import UnsafePathError, is_link, refuse_link, remove_tree_we_made, replace_file, staged_file
from zero_plugins import write_bytes_no_follow


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file zero must never change: the target of the links the tests plant."""
    (tmp_path / "outside").mkdir()
    precious = tmp_path / "outside" / "precious.json"
    precious.write_bytes(b"shared cache")
    return precious


def test_write_bytes_no_follow_refuses_a_link_and_names_it(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "config.json"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError) as caught:
        write_bytes_no_follow(link, b"new")
    assert str(caught.value) == f"{link} is a symbolic link, which zero does not write through; move it away"
    assert outside.read_bytes() == b"shared cache" and is_link(link)


@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling link"])
def test_replace_file_replaces_the_link_not_its_target(tmp_path: Path, outside: Path, dangling: bool) -> None:
    link = tmp_path / "report.html"
    link.symlink_to(tmp_path / "nowhere" if dangling else outside)
    replace_file(link, b"<html>")
    assert not is_link(link) and link.read_bytes() == b"<html>"
    assert outside.read_bytes() == b"shared cache" and not (tmp_path / "nowhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["outside", "report.html"], "no temporary directory is left"


def test_a_staged_file_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), staged_file(target) as fresh:
        fresh.write_bytes(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["model.bin"]


def test_a_staged_file_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match=r"is a directory; pass the path of a file$"):
        with staged_file(tmp_path):
            pass


def test_refuse_link_names_the_link_its_target_and_the_fix(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "tag"
    link.symlink_to(outside)
    refuse_link(outside, "tag", "pass another")  # a real file passes
    with pytest.raises(UnsafePathError) as caught:
        refuse_link(link, "checkpoint tag path", "pass another tag")
    assert str(caught.value) == f"checkpoint tag path {link} is a symbolic link (to {outside}); pass another tag"


def test_remove_tree_we_made_removes_only_a_marked_real_directory(tmp_path: Path, outside: Path) -> None:
    ours = tmp_path / "staging"
    ours.mkdir()
    (ours / ".marker").write_text("{}")
    (ours / "weights").symlink_to(outside)
    (ours / "dir").symlink_to(outside.parent, target_is_directory=True)
    unmarked = tmp_path / "user"
    unmarked.mkdir()
    (unmarked / "notes").write_text("keep")
    link_to_marked = tmp_path / "link"
    link_to_marked.symlink_to(ours, target_is_directory=True)
    assert remove_tree_we_made(link_to_marked, ".marker") is False and ours.is_dir()
    assert remove_tree_we_made(unmarked, ".marker") is False and (unmarked / "notes").read_text() == "keep"
    assert remove_tree_we_made(tmp_path / "missing", ".marker") is False
    assert remove_tree_we_made(ours, ".marker") is True and not ours.exists()
    assert outside.read_bytes() == b"shared cache" and sorted(os.listdir(outside.parent)) == ["precious.json"]


def test_a_marker_that_is_a_link_does_not_mark_the_tree(tmp_path: Path, outside: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / ".marker").symlink_to(outside)
    assert remove_tree_we_made(tree, ".marker") is False and tree.is_dir()
