"""`zero pin build` prebuilds the C++ ops (the native pin op, the CPU allocator count); `zero pin check`
reports backends, memlock limit, the ops' state, the native backend's block cache and whether it uses huge pages."""
from __future__ import annotations

import argparse
import time

from zero_plugins import CommandResult, format_table

from ._accounting import ACCOUNT
from ._cache import ENV_VAR as CACHE_ENV_VAR
from ._cache import cache_limit
from ._hugepages import huge_page_policy
from ._memlock import memlock_limit
from ._native_build import COUNTING_ALLOCATOR_OP, LOCKED_BLOCK_OP
from ._select import REGISTRY, backend_statuses, selected_name
from ._units import format_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["build", "check"],
                        help="build: compile the native op now (it is cached); "
                             "check: show each backend's availability, the memlock limit and the op's state")
    parser.add_argument("--verbose", action="store_true", help="build: show the compiler's output")


def run(args: argparse.Namespace) -> CommandResult:
    return _build(args.verbose) if args.action == "build" else _check()


def _build(verbose: bool) -> CommandResult:
    """Both ops: the native pin op (its state is the document's top level) and the CPU allocator count."""
    started = time.perf_counter()
    LOCKED_BLOCK_OP.load(verbose=verbose)  # NativeBuildError (a ZeroError) is printed as one line by `zero`
    COUNTING_ALLOCATOR_OP.load(verbose=verbose)
    seconds = time.perf_counter() - started
    state, counter = LOCKED_BLOCK_OP.state(), COUNTING_ALLOCATOR_OP.state()
    return CommandResult({**state, "counting_allocator_op": counter, "seconds": round(seconds, 3)},
                         f"native pin op built: {state['detail']}\n"
                         f"CPU allocator count built: {counter['detail']} ({seconds:.1f} s)")


def _check() -> CommandResult:
    selected = selected_name()
    REGISTRY.get(selected)  # an unknown DS_PIN_MEMORY_BACKEND fails here, listing what is installed
    statuses = backend_statuses()
    limit, op, counter = memlock_limit(), LOCKED_BLOCK_OP.state(), COUNTING_ALLOCATOR_OP.state()
    cache = {"limit": cache_limit(), "cached": ACCOUNT.cached()}
    huge = huge_page_policy()
    rows = [(s["name"] + (" *" if s["selected"] else ""), "yes" if s["available"] else "no", s["distribution"], s["reason"])
            for s in statuses]
    text = "\n".join([
        format_table(["backend", "available", "distribution", "reason"], rows),
        "(* selected by DS_PIN_MEMORY_BACKEND, default torch)",
        f"memlock limit (ulimit -l): soft {_limit_text(limit['soft'])}, hard {_limit_text(limit['hard'])}",
        f"native op: {op['state']} ({op['detail']})",
        f"CPU allocator count op: {counter['state']} ({counter['detail']})",
        f"native pin cache: {_cache_text(cache['limit'])}, {format_bytes(cache['cached'])} cached now",
        f"native huge pages: {'used' if huge['used'] else 'not used'} ({huge['reason']})",
    ])
    usable = any(s["selected"] and s["available"] for s in statuses)
    data = {"selected": selected, "backends": statuses, "memlock_limit": limit, "native_op": op,
            "counting_allocator_op": counter,
            "pin_cache": cache, "huge_pages": huge}
    return CommandResult(data, text, exit_code=0 if usable else 1)


def _cache_text(limit: int) -> str:
    if limit == 0:
        return f"off ({CACHE_ENV_VAR}=0)"
    return f"keeps up to {format_bytes(limit)} of released blocks for reuse ({CACHE_ENV_VAR})"


def _limit_text(nbytes: int | None) -> str:
    return "unlimited" if nbytes is None else format_bytes(nbytes)
