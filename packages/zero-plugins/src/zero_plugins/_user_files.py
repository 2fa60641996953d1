"""The files a user names on the command line: config files read, output files checked before a run.

A config file must be a regular file of at most MAX_CONFIG_BYTES. Anything else is refused in one line
before a byte is read: a named pipe would block the read forever, /dev/zero would fill memory, a
directory cannot be read. Every package reads its JSON inputs through read_config_text, so the rule holds
everywhere (docs/config.md, "Config files").
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ._errors import ZeroError

#: The largest config file read: 16 MiB. Real ds_configs and config.json files are a few KiB; a file
#: past this is a data file or a checkpoint passed by mistake, and reading it whole would only waste memory.
MAX_CONFIG_BYTES = 16 * 2**20
_INT_DIGITS = 4000  # under sys.get_int_max_str_digits()'s default of 4300

# What a file that is not a regular file is, for the message (a socket cannot be opened: it never gets here).
_KINDS = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


class ConfigFileError(ZeroError):
    """A config file that cannot be read: missing, not a regular file, too large, or not UTF-8.

    `path` is the file as shown (repr() where it holds unprintable characters), `problem` what is wrong
    with it and the fix; the message is "WHAT PATH: PROBLEM".
    """

    def __init__(self, what: str, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{what} {path}: {problem}")


def json_integer(literal: str) -> int | float:
    """A JSON integer literal (json.loads' `parse_int`): beyond Python's int-parsing limit (4300 digits) a float,
    infinite if need be, so that the key's own bound names it instead of a parser error naming the file."""
    return int(literal) if len(literal.lstrip("-")) <= _INT_DIGITS else float(literal)


class OutputPathError(ZeroError):
    """An output file that the run could not write at its end; refused before the run starts."""


def read_config_text(path: str | os.PathLike[str], *, what: str = "config file",
                     limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of the config file `path` (UTF-8, a byte-order mark skipped), or one ConfigFileError.

    `what` names the input in the message ("config file", "--model", ...). The file is opened without
    blocking and checked with fstat before it is read, so a FIFO or a device is refused at once (a check
    before opening could be raced); at most `limit` + 1 bytes are read, so a file that grows is caught too.
    """
    shown = _shown(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigFileError(what, shown, "not found") from None
    except ValueError:  # a NUL character in the path
        raise ConfigFileError(what, shown, "a path cannot contain a NUL character") from None
    except OSError as error:
        raise ConfigFileError(what, shown, f"cannot be read ({error.strerror or error})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigFileError(what, shown, "is a directory; pass the JSON file in it")
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
            raise ConfigFileError(what, shown, f"is {kind}, not a regular file; save the config to a file and "
                                               "pass that")
        with open(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise ConfigFileError(what, shown, f"cannot be read ({error.strerror or error})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ConfigFileError(what, shown, f"is larger than {_mib(limit)}, the most a config file may hold; "
                                           "pass the JSON config itself")
    try:
        return data.decode("utf-8-sig")  # -sig: a byte-order mark, which some Windows editors write, is skipped
    except UnicodeDecodeError as error:
        raise ConfigFileError(what, shown, f"not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def check_output_path(path: str | os.PathLike[str], flag: str) -> None:
    """Raise OutputPathError, naming `flag`, unless a file can be written at `path`.

    Checked before a run, so a long run does not end in a traceback for a typo in its output path:
    the path is not a directory, its directory exists, and a file can be created there
    (check_writable_directory), as the output replaces any file at the path (replace_file).
    """
    shown, text = _shown(path), os.fsdecode(path)
    if not text:
        raise OutputPathError(f"{flag} is empty; pass a file path")
    if "\x00" in text:
        raise OutputPathError(f"{flag} {shown}: a path cannot contain a NUL character")
    target = Path(text)
    if target.is_dir():
        raise OutputPathError(f"{flag} {shown}: is a directory; pass the path of a file (in it, or elsewhere)")
    parent = target.parent
    if not parent.is_dir():
        problem = "is not a directory" if parent.exists() else "does not exist; create that directory first"
        raise OutputPathError(f"{flag} {shown}: {_shown(parent)} {problem}")
    # Even an existing file is replaced by a new one (replace_file: never written through a link), so it is
    # the directory that must take a new file.
    check_writable_directory(parent, flag, given=path)


def check_writable_directory(directory: str | os.PathLike[str], flag: str, *,
                             given: str | os.PathLike[str] | None = None) -> None:
    """Raise OutputPathError, naming `flag` and what it was `given` (default `directory`), unless a file
    can be created in `directory`: tried with a nameless temporary file, as permission bits alone do not
    tell (root on a read-only mount, sysfs)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        shown = _shown(directory if given is None else given)
        raise OutputPathError(f"{flag} {shown}: cannot create a file in {_shown(directory)} "
                              f"({error.strerror or error}); pass a path in a directory you can write to") from None


def _shown(path: str | os.PathLike[str]) -> str:
    text = os.fsdecode(path)
    return text if text.isprintable() else repr(text)


def _mib(size: int) -> str:
    return f"{size // 2**20} MiB" if size % 2**20 == 0 else f"{size} bytes"
