"""The body of `zero checkpoint inspect` and `zero checkpoint export` (their arguments: _arguments.py).

Text goes to stdout as plain tables; the export's progress goes to stderr, so `--json` prints JSON alone on stdout.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from zero_plugins import CommandResult, format_table

from ._deepspeed_cli import import_command
from ._export import export_checkpoint
from ._inspect import inspect_checkpoints


def checkpoint_command(args: argparse.Namespace) -> CommandResult:
    """`zero checkpoint ACTION ...` with the parsed arguments."""
    if args.action == "import":
        return import_command(args)
    if args.action == "inspect":
        data = inspect_checkpoints(args.dir, args.tag, args.trust_checkpoint)
        complete = all(summary["complete"] for summary in data["tags"])
        return CommandResult(data, _inspect_text(data), exit_code=0 if complete else 1)
    result = export_checkpoint(args.dir, args.out, args.tag, args.dtype, args.max_shard_size, progress=_progress,
                               overwrite=args.overwrite, trust_checkpoint=args.trust_checkpoint)
    return CommandResult(result, _export_text(result))


def format_bytes(count: int) -> str:
    value, unit = float(count), "B"
    for larger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"


def _progress(done: int, total: int, name: str) -> None:
    print(f"export: {done}/{total} tensors ({name})", file=sys.stderr, flush=True)


# The `files` column: what the tag's manifest says of its files (_manifest.Integrity).
_FILES = {"verified": "verified", "unverified": "no manifest", "damaged": "DAMAGED"}


def _inspect_text(data: dict[str, Any]) -> str:
    tags = data["tags"]
    rows = [(s["tag"] + (" *" if s["latest"] else ""), "yes" if s["complete"] else "NO", _FILES[s["integrity"]],
             s.get("world_size", "?"),
             s.get("stage", "?"), s.get("compute_dtype", "?"),
             f"{s['parameters']} ({s['parameter_elements']:,} elements)" if "parameters" in s else "?",
             format_bytes(sum(c["bytes"] for c in s.get("categories", {}).values())))
            for s in tags]
    latest = data["latest"]
    lines = [f"checkpoints in {data['directory']}" + (f" (* latest: {latest})" if latest else " (no `latest` file)"),
             format_table(["tag", "complete", "files", "world size", "stage", "dtype", "parameters", "bytes"], rows)]
    if not data["latest_exists"]:
        lines.append(f"`latest` names {latest}, which is not in {data['directory']}")
    for s in tags:
        categories = s.get("categories", {})
        lines += ["", f"{s['tag']}:" + (" frozen parameters excluded" if s.get("frozen_excluded") else "")]
        if categories:
            lines.append(format_table(["category", "tensors", "bytes"],
                                      [(name, c["tensors"], format_bytes(c["bytes"])) for name, c in categories.items()]))
        lines += [f"  problem: {problem}" for problem in s["problems"]]
    return "\n".join(lines)


def _export_text(result: dict[str, Any]) -> str:
    files = result["files"]
    lines = [f"exported {result['tensors']} tensors ({format_bytes(result['bytes'])}, {result['dtype']}) of "
             f"{result['checkpoint']} to {result['out']}: {files[0]}" +
             (f" ... {files[-1]} and model.safetensors.index.json" if len(files) > 1 else "")]
    if result["config"]:
        lines.append("config.json: copied from the checkpoint")
    elif result["kept"]:
        lines.append("config.json: the checkpoint has none; the config.json already in OUT (not written by this "
                     "export) was kept: check that it is this model's")
    else:
        lines.append("config.json: the checkpoint has none (its model had no Hugging Face config); add the model's "
                     "config.json to the directory before from_pretrained")
    return "\n".join(lines)
