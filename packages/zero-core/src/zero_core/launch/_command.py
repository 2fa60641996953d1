"""`zero launch [torchrun's options] program.py [args]` and `python -m zero_core.launch`: torchrun, with deepspeed
aliased to zero_core in the processes it starts and DeepSpeed's `--local_rank=<n>` given to the program.

torchrun (torch.distributed.run) parses the options and runs the agent, in this process; zero adds two things
to the environment its ranks inherit: this package's _site folder first on PYTHONPATH (its sitecustomize runs
zero_core.launch._child at each process's start-up) and _child.LOCAL_RANK_ARGUMENT. Both are taken back out of
this process's environment when the run ends.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from zero_plugins import ZeroError

from ._alias import installed_deepspeed_note
from ._child import LOCAL_RANK_ARGUMENT

SITE_FOLDER = Path(__file__).resolve().parent / "_site"
MAX_EXIT_STATUS = 255


class LaunchError(ZeroError, ValueError):
    """A `zero launch` command line that cannot run; the message names the option or file and the fix."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise LaunchError(f"{message}; see {self.prog} --help")


def launch_parser(prog: str) -> argparse.ArgumentParser:
    """torchrun's own parser (its options, their PET_* environment variables), plus DeepSpeed's --no_local_rank."""
    from torch.distributed.run import get_args_parser

    parser = _Parser(prog=prog, parents=[get_args_parser()], add_help=False,
                     description="torchrun, with `import deepspeed` resolving to zero_core in the processes it starts "
                                 "and --local_rank=<n> passed to the program as DeepSpeed's launcher does.")
    parser.add_argument("--no_local_rank", "--no-local-rank", action="store_true",
                        help="do not pass --local_rank=<n> to the program (DeepSpeed's launcher's flag); the "
                             "ranks still get LOCAL_RANK")
    return parser


def launch(argv: Sequence[str], prog: str = "zero launch") -> int:
    """Run the command line; the exit status: 0, or the first failed rank's."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import run

    args = launch_parser(prog).parse_args(list(argv))
    _check(args)
    note = installed_deepspeed_note("in the processes zero launch starts")
    if note is not None:
        print(note, file=sys.stderr, flush=True)
    with _launch_environment(pass_local_rank=not args.no_local_rank):
        try:
            run(args)
        except ChildFailedError as error:
            print(error.format_msg(), file=sys.stderr)
            _, failure = error.get_first_failure()
            return _exit_status(failure.exitcode)
    return 0


def _check(args: argparse.Namespace) -> None:
    if args.no_python and not args.no_local_rank:
        raise LaunchError("--no-python runs a program that is not Python, and zero launch adds --local_rank=<n> "
                          "inside a Python program's start-up; add --no_local_rank (the ranks still get LOCAL_RANK)")
    if args.run_path and not args.no_local_rank:
        raise LaunchError("--run-path runs the program inside torchrun's own workers, whose arguments torchrun sets "
                          "after start-up, so zero launch cannot add --local_rank=<n>; leave out --run-path, or add "
                          "--no_local_rank")
    _check_nproc(args.nproc_per_node)
    if args.module or args.no_python:
        return
    program = Path(args.training_script)
    if not program.exists():
        raise LaunchError(f"no program file {args.training_script} (looked for {program.resolve()}); give the "
                          "path of the Python program to run, or --module NAME to run a module")
    if not program.is_file():
        raise LaunchError(f"{args.training_script} is not a file; give the path of the Python program to run")


def _check_nproc(value: str) -> None:
    """torchrun reads --nproc_per_node only once the agent starts, and a bad one is a traceback there."""
    from torch.distributed.run import determine_local_world_size

    try:
        count = determine_local_world_size(value)
    except ValueError as error:
        raise LaunchError(f"--nproc_per_node {value}: {error}; give a number of processes per node, or auto, cpu "
                          "or gpu") from error
    if count < 1:
        raise LaunchError(f"--nproc_per_node {value}: must be at least 1 process per node")


@contextlib.contextmanager
def _launch_environment(pass_local_rank: bool) -> Iterator[None]:
    """The variables the ranks inherit, set for the run and restored after it."""
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    before = _set_environment({
        "PYTHONPATH": os.pathsep.join([str(SITE_FOLDER), *(e for e in entries if e != str(SITE_FOLDER))]),
        LOCAL_RANK_ARGUMENT: "1" if pass_local_rank else None,
    })
    try:
        yield
    finally:
        _set_environment(before)


def _set_environment(values: dict[str, str | None]) -> dict[str, str | None]:
    """Sets each variable (None: unsets it); returns the values they had, in the same form."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return before


def _exit_status(exitcode: int) -> int:
    """A rank's exit code as a process status: a signal -N as 128+N, as a shell reports it."""
    if exitcode < 0:
        return min(128 - exitcode, MAX_EXIT_STATUS)
    return min(exitcode, MAX_EXIT_STATUS) or 1


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """`zero launch`'s arguments, all handed to launch() as they are: torchrun's parser reads them there, so that
    building the `zero` command's parser imports no torch. Every word is positional here (no prefix character),
    so `zero launch --nproc_per_node 2 program.py` reaches torchrun's parser whole, --help included."""
    parser.prefix_chars = "\0"
    parser.add_argument("launch_arguments", nargs=argparse.REMAINDER)


def launch_command(args: argparse.Namespace) -> int:
    return launch(args.launch_arguments)


def main() -> NoReturn:
    """`python -m zero_core.launch ...`: a refused command line is one line on stderr and exit status 2."""
    try:
        status = launch(sys.argv[1:], prog="python -m zero_core.launch")
    except ZeroError as error:
        print(f"python -m zero_core.launch: error: {error}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    sys.exit(status)
