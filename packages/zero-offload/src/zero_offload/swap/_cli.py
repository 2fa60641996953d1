"""`zero swap check` lists the swap backends (and whether a path can do O_DIRECT);
`zero swap bench` measures the selected backend against raw O_DIRECT on the same disk."""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from zero_plugins import CommandResult, add_action_json_flag, format_table

from ._direct import BUFFERED_ENV, buffered_from_env, direct_io_problem, filesystem_type
from ._errors import SwapError
from ._select import DEFAULT, ENV_VAR, REGISTRY, backend_listing, selected_name
from ._units import format_bytes, parse_bytes, parse_list


def add_swap_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="list the swap backends, which is selected, and why any is unavailable",
                               description="List the swap backends (ZERO_SWAP_BACKEND selects one), and with "
                                           "--path whether that directory can do O_DIRECT.")
    check.add_argument("--path", metavar="DIR", help="also check that swap files in DIR can use O_DIRECT")
    add_action_json_flag(check)
    bench = actions.add_parser(
        "bench", help="measure the selected backend's read and write bandwidth against raw O_DIRECT",
        description="Write then read a file through the selected swap backend with the aio settings, and measure "
                    "the raw sequential O_DIRECT bandwidth of the same disk (one thread, 8 MiB blocks, like dd) in "
                    "the same run; print both and their ratio. Its files are removed at the end.")
    bench.add_argument("--path", metavar="DIR", help="directory on the disk to measure (required)")
    bench.add_argument("--size", default="1GiB", help="bytes written and read per measurement (default 1GiB)")
    bench.add_argument("--config", metavar="DS_CONFIG", help="take the aio settings from this ds_config's `aio` block")
    bench.add_argument("--block-size", help="aio.block_size (overrides --config); e.g. 1MiB")
    bench.add_argument("--queue-depth", help="aio.queue_depth (overrides --config)")
    bench.add_argument("--threads", help="aio.intra_op_parallelism (overrides --config)")
    bench.add_argument("--repeat", default="3", help="rounds; the figures are medians (default 3)")
    bench.add_argument("--buffered", action="store_true",
                       help=f"without O_DIRECT, through the page cache (as {BUFFERED_ENV}=1); for paths that refuse it")
    bench.add_argument("--sweep", action="store_true",
                       help="try block sizes x queue depths x threads and print the best as an aio block")
    bench.add_argument("--block-sizes", help="--sweep: block sizes to try (default 128K,1M,4M,8M)")
    bench.add_argument("--queue-depths", help="--sweep: queue depths to try (default 1,4,8,16,32)")
    bench.add_argument("--thread-counts", help="--sweep: thread counts to try (default 1,2)")
    add_action_json_flag(bench)


def swap_command(args: argparse.Namespace) -> CommandResult:
    return _check(args.path) if args.action == "check" else _bench(args)


def _check(path: str | None) -> CommandResult:
    listing = backend_listing()
    statuses = listing["backends"]
    buffered = buffered_from_env()
    rows = [(s["name"] + (" *" if s["selected"] else ""), "yes" if s["available"] else "no", s["distribution"], s["reason"])
            for s in statuses]
    lines = [format_table(["backend", "available", "distribution", "reason"], rows),
             f"(* selected by {ENV_VAR}, default {DEFAULT})",
             f"I/O mode: {'buffered (' + BUFFERED_ENV + ' is set): no O_DIRECT' if buffered else 'O_DIRECT'}"]
    data: dict[str, Any] = {**listing, "buffered": buffered}
    usable = any(s["selected"] and s["available"] for s in statuses)
    if path is not None:
        if not os.path.isdir(path):
            raise SwapError(f"--path {path}: not a directory")
        problem = direct_io_problem(path)
        fstype = filesystem_type(path) or "unknown"
        data["path"] = {"path": path, "filesystem": fstype, "o_direct": problem is None,
                        "reason": problem or "open(..., O_DIRECT) works"}
        lines.append(f"{path} ({fstype}): " + ("O_DIRECT works" if problem is None else f"no O_DIRECT: {problem}"))
        usable = usable and (problem is None or buffered)
    return CommandResult(data, "\n".join(lines), exit_code=0 if usable else 1)


def _positive(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise SwapError(f"{option}: {text!r} is not a positive integer")
    return int(text)


def _aio(args: argparse.Namespace) -> Any:
    from zero_plugins.ds_config import AioConfig, load_config

    aio = load_config(args.config).aio if args.config else AioConfig()
    overrides = {"block_size": parse_bytes(args.block_size, "--block-size") if args.block_size else None,
                 "queue_depth": _positive(args.queue_depth, "--queue-depth"),
                 "intra_op_parallelism": _positive(args.threads, "--threads")}
    aio = AioConfig(**{**aio.model_dump(), **{key: value for key, value in overrides.items() if value is not None}})
    if aio.block_size % 4096:
        raise SwapError(f"block size {aio.block_size}: must be a multiple of 4096 bytes (O_DIRECT)")
    return aio


def _bench(args: argparse.Namespace) -> CommandResult:
    from ._bench import DEFAULT_SWEEP, bench, sweep

    if not args.path:
        raise SwapError("zero swap bench needs --path DIR: a directory on the disk to measure")
    size = parse_bytes(args.size, "--size")
    buffered = args.buffered or buffered_from_env()
    REGISTRY.get(selected_name())  # an unknown ZERO_SWAP_BACKEND fails before anything is written
    single = {"--config": args.config, "--block-size": args.block_size, "--queue-depth": args.queue_depth,
              "--threads": args.threads}
    lists = {"--block-sizes": args.block_sizes, "--queue-depths": args.queue_depths, "--thread-counts": args.thread_counts}
    if args.sweep and any(value is not None for value in single.values()):
        given = [flag for flag, value in single.items() if value is not None]
        raise SwapError(f"--sweep tries lists of settings: use --block-sizes, --queue-depths and --thread-counts "
                        f"instead of {', '.join(given)}")
    if not args.sweep and any(value is not None for value in lists.values()):
        given = [flag for flag, value in lists.items() if value is not None]
        raise SwapError(f"{', '.join(given)} only apply with --sweep; for one setting use --block-size, "
                        "--queue-depth and --threads")
    if args.sweep:
        grid = {"block_size": parse_list(args.block_sizes, "--block-sizes") if args.block_sizes else DEFAULT_SWEEP["block_size"],
                "queue_depth": parse_list(args.queue_depths, "--queue-depths", int) if args.queue_depths
                else DEFAULT_SWEEP["queue_depth"],
                "intra_op_parallelism": parse_list(args.thread_counts, "--thread-counts", int) if args.thread_counts
                else DEFAULT_SWEEP["intra_op_parallelism"]}
        for block in grid["block_size"]:
            if block % 4096:
                raise SwapError(f"--block-sizes: {block} is not a multiple of 4096 bytes (O_DIRECT)")
        result = sweep(args.path, size, grid, buffered=buffered)
        return CommandResult(result, _sweep_text(result))
    repeat = _positive(args.repeat, "--repeat") or 1
    result = bench(args.path, size, _aio(args), repeat=repeat, buffered=buffered)
    return CommandResult(result, _bench_text(result))


def _bench_text(r: dict[str, Any]) -> str:
    aio, raw, cpu = r["aio"], r["raw"], r["cpu_seconds_per_gib"]
    rows = [
        (f"raw {r['mode']} (1 thread, 8 MiB blocks)", f"{raw['write_gbps']:.2f} GB/s", f"{raw['read_gbps']:.2f} GB/s"),
        (f"backend {r['backend']}", f"{r['write_gbps']:.2f} GB/s", f"{r['read_gbps']:.2f} GB/s"),
        ("backend / raw", f"{r['write_ratio']:.0%}", f"{r['read_ratio']:.0%}"),
        ("CPU s per GiB: raw, backend", f"{cpu['raw_write']:.2f}, {cpu['backend_write']:.2f}",
         f"{cpu['raw_read']:.2f}, {cpu['backend_read']:.2f}"),
    ]
    return "\n".join([
        f"swap bench: {format_bytes(r['size'])} in {r['path']} ({r['filesystem']}), {r['mode']}, "
        f"median of {r['rounds']} round(s)",
        f"backend {r['backend']}: block_size {aio['block_size']}, queue_depth {aio['queue_depth']}, "
        f"intra_op_parallelism {aio['intra_op_parallelism']}",
        format_table(["", "write", "read"], rows),
    ])


def _sweep_text(r: dict[str, Any]) -> str:
    raw = r["raw"]
    rows = [(format_bytes(t["block_size"]), t["queue_depth"], t["intra_op_parallelism"], f"{t['write_gbps']:.2f}",
             f"{t['read_gbps']:.2f}", f"{t['write_read_gbps']:.2f}") for t in r["trials"]]
    return "\n".join([
        f"swap bench --sweep: backend {r['backend']}, {format_bytes(r['size'])} per setting in {r['path']} "
        f"({r['filesystem']}), {r['mode']}",
        format_table(["block", "queue depth", "threads", "write GB/s", "read GB/s", "write+read GB/s"], rows),
        f"raw {r['mode']} (1 thread, 8 MiB blocks; before and after, median): write {raw['write_gbps']:.2f} GB/s, "
        f"read {raw['read_gbps']:.2f} GB/s, write+read {raw['write_read_gbps']:.2f} GB/s",
        f"best: {r['best']['write_read_gbps']:.2f} GB/s write+read, {r['best_ratio']:.0%} of raw; for the ds_config:",
        json.dumps({"aio": r["aio"]}, indent=2),
    ])
