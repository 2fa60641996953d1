"""`zero pin build` prebuilds the native op; `zero pin check` reports backends, memlock limit, op state,
the native backend's block cache and whether it uses huge pages."""
from __future__ import annotations

import argparse
import time

from zero_plugins import CommandResult, format_table

from ._accounting import ACCOUNT
from ._cache import ENV_VAR as CACHE_ENV_VAR
from ._cache import cache_limit
from ._hugepages import huge_page_policy
from ._memlock import memlock_limit
from ._native_build import load_op, native_build_state
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
    started = time.perf_counter()
    load_op(verbose=verbose)  # NativeBuildError (a ZeroError) is printed as one line by `zero`
    seconds = time.perf_counter() - started
    state = native_build_state()
    return CommandResult({**state, "seconds": round(seconds, 3)}, f"native pin op built: {state['detail']} ({seconds:.1f} s)")


def _check() -> CommandResult:
    selected = selected_name()
    REGISTRY.get(selected)  # an unknown DS_PIN_MEMORY_BACKEND fails here, listing what is installed
    statuses = backend_statuses()
    limit, op = memlock_limit(), native_build_state()
    cache = {"limit": cache_limit(), "cached": ACCOUNT.cached()}
    huge = huge_page_policy()
    rows = [(s["name"] + (" *" if s["selected"] else ""), "yes" if s["available"] else "no", s["distribution"], s["reason"])
            for s in statuses]
    text = "\n".join([
        format_table(["backend", "available", "distribution", "reason"], rows),
        "(* selected by DS_PIN_MEMORY_BACKEND, default torch)",
        f"memlock limit (ulimit -l): soft {_limit_text(limit['soft'])}, hard {_limit_text(limit['hard'])}",
        f"native op: {op['state']} ({op['detail']})",
        f"native pin cache: {_cache_text(cache['limit'])}, {format_bytes(cache['cached'])} cached now",
        f"native huge pages: {'used' if huge['used'] else 'not used'} ({huge['reason']})",
    ])
    usable = any(s["selected"] and s["available"] for s in statuses)
    data = {"selected": selected, "backends": statuses, "memlock_limit": limit, "native_op": op,
            "pin_cache": cache, "huge_pages": huge}
    return CommandResult(data, text, exit_code=0 if usable else 1)


def _cache_text(limit: int) -> str:
    if limit == 0:
        return f"off ({CACHE_ENV_VAR}=0)"
    return f"keeps up to {format_bytes(limit)} of released blocks for reuse ({CACHE_ENV_VAR})"


def _limit_text(nbytes: int | None) -> str:
    return "unlimited" if nbytes is None else format_bytes(nbytes)
