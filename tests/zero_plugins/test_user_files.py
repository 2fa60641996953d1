"""zero_plugins' user files: read_config_text reads only regular files of at most 16 MiB, never blocking;
check_output_path refuses, before a run, an output path the run could not write at its end."""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from zero_plugins import (
    MAX_CONFIG_BYTES,
    ConfigFileError,
    OutputPathError,
    ZeroError,
    check_output_path,
    check_writable_directory,
    read_config_text,
    replace_file,
)

# A FIFO read without O_NONBLOCK waits for a writer forever: this fails such a test instead.
pytestmark = pytest.mark.timeout(30)


def _refusal(path: str | Path, **kwargs: object) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as caught:
        read_config_text(path, **kwargs)  # type: ignore[arg-type]
    return caught.value


def test_a_regular_file_is_read_as_utf8_with_its_byte_order_mark_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_bytes(b'\xef\xbb\xbf{"note": "caf\xc3\xa9"}')
    assert read_config_text(path) == '{"note": "café"}'


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    error = _refusal(tmp_path / "pipe", what="--model")
    assert str(error) == (f"--model {tmp_path / 'pipe'}: is a named pipe (FIFO), not a regular file; "
                          "save the config to a file and pass that")
    assert isinstance(error, ZeroError)


def test_a_device_is_refused_before_a_byte_is_read() -> None:
    assert str(_refusal("/dev/zero")) == ("config file /dev/zero: is a character device, not a regular file; "
                                          "save the config to a file and pass that")


def test_a_directory_and_a_missing_file_are_named(tmp_path: Path) -> None:
    assert str(_refusal(tmp_path)) == f"config file {tmp_path}: is a directory; pass the JSON file in it"
    missing = _refusal(tmp_path / "nope.json", what="ds_config")
    assert (missing.path, missing.problem) == (str(tmp_path / "nope.json"), "not found")


def test_the_size_bound_is_16_mib_and_a_file_at_it_is_read(tmp_path: Path) -> None:
    assert MAX_CONFIG_BYTES == 16 * 2**20
    path = tmp_path / "big.json"
    with open(path, "wb") as file:
        file.truncate(MAX_CONFIG_BYTES)  # sparse: reads as NUL bytes
    assert len(read_config_text(path)) == MAX_CONFIG_BYTES
    with open(path, "ab") as file:
        file.write(b" ")
    assert str(_refusal(path)) == (f"config file {path}: is larger than 16 MiB, the most a config file may hold; "
                                   "pass the JSON config itself")


def test_a_smaller_limit_is_kept_to_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_bytes(b"0123456789")
    assert read_config_text(path, limit=10) == "0123456789"
    assert _refusal(path, limit=9).problem == ("is larger than 9 bytes, the most a config file may hold; "
                                               "pass the JSON config itself")


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_bytes(b'{"a": "\xe9"}')
    assert _refusal(path).problem == "not UTF-8 text (byte 7); save it as UTF-8"


def test_an_unprintable_path_is_shown_escaped() -> None:
    assert str(_refusal("ds\x00.json")) == "config file 'ds\\x00.json': a path cannot contain a NUL character"
    assert _refusal("ds\n.json").path == "'ds\\n.json'"


def test_a_writable_output_path_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    check_output_path(tmp_path / "report.html", "--html")
    (tmp_path / "old.html").write_text("x")
    check_output_path(str(tmp_path / "old.html"), "--html")  # replaced by a new file
    assert sorted(os.listdir(tmp_path)) == ["old.html"]


@pytest.mark.parametrize(("name", "message"), [
    ("", "--html is empty; pass a file path"),
    ("{dir}", "--html {dir}: is a directory; pass the path of a file (in it, or elsewhere)"),
    ("{dir}/missing/report.html", "--html {dir}/missing/report.html: {dir}/missing does not exist; "
                                  "create that directory first"),
    ("{dir}/file/report.html", "--html {dir}/file/report.html: {dir}/file is not a directory"),
    ("{dir}/a\x00b.html", "--html '{dir}/a\\x00b.html': a path cannot contain a NUL character"),
])
def test_an_output_path_that_cannot_be_written_is_one_line_naming_the_flag(tmp_path: Path, name: str,
                                                                           message: str) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError) as caught:
        check_output_path(name.format(dir=tmp_path), "--html")
    assert str(caught.value) == message.format(dir=tmp_path)


def test_a_directory_that_takes_no_new_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a read-only mount does even to root, where permission bits would say yes.
    def refuse(**kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(OutputPathError) as caught:
        check_output_path(tmp_path / "report.html", "--html")
    assert str(caught.value) == (f"--html {tmp_path / 'report.html'}: cannot create a file in {tmp_path} "
                                 "(Permission denied); pass a path in a directory you can write to")
    with pytest.raises(OutputPathError) as caught:
        check_writable_directory(tmp_path, "--path")
    assert str(caught.value) == (f"--path {tmp_path}: cannot create a file in {tmp_path} (Permission denied); "
                                 "pass a path in a directory you can write to")


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs here")
def test_sysfs_takes_no_new_file_even_for_root() -> None:
    with pytest.raises(OutputPathError, match=r"^--path /sys: cannot create a file in /sys \("):
        check_writable_directory("/sys", "--path")


def test_an_existing_read_only_file_passes_as_it_is_replaced_not_written(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("x")
    target.chmod(0o444)
    check_output_path(target, "--html")
    replace_file(target, b"new")
    assert target.read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["report.html"]
