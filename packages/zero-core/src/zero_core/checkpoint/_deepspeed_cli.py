"""The body of `zero checkpoint import DS_DIR OUT [--tag T]`: a DeepSpeed checkpoint rewritten as a zero one.

Its arguments are declared with the other `zero checkpoint` actions' (zero_core._plugin), where building
the parser imports no torch; `add_import_arguments` is what they are.
"""
from __future__ import annotations

import argparse
import json

from zero_plugins import CommandResult

IMPORT_HELP = "convert a DeepSpeed checkpoint (stages 1-3, any world size) into a zero checkpoint"
IMPORT_DESCRIPTION = (
    "Read one tag of a checkpoint that DeepSpeed's engine.save_checkpoint wrote (ZeRO stages 1-3, fp32, bf16 or "
    "fp16, any number of ranks) and write it to OUT/<tag> as a zero checkpoint, which engine.load_checkpoint(OUT) "
    "loads at any world size and stage. Needs no DeepSpeed installed. DS_DIR is DeepSpeed's save_dir (the tag "
    "`latest` names, or --tag) or a tag directory itself. Reads one tensor at a time.")


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `zero checkpoint import` (imports nothing heavy)."""
    parser.add_argument("dir", metavar="DS_DIR", help="DeepSpeed's save_dir, or one of its tag directories")
    parser.add_argument("out", metavar="OUT", help="the zero save_dir to write the checkpoint into (created if needed)")
    parser.add_argument("--tag", help="the DeepSpeed tag to import (default: the one `latest` names)")


def import_command(args: argparse.Namespace) -> CommandResult:
    from ._describe import Description
    from ._deepspeed import import_deepspeed_checkpoint

    final = import_deepspeed_checkpoint(args.dir, args.out, args.tag)
    description = Description.read(final)
    data = {"checkpoint": str(final), "tag": description.tag, "world_size": description.world_size,
            "stage": description.stage, "compute_dtype": description.compute_dtype,
            "parameters": len(description.params), "optimizer_state": description.optimizer_state,
            "tensors": description.keys}
    text = (f"imported DeepSpeed's {args.dir} (stage {description.stage}, {description.world_size} ranks, "
            f"{description.compute_dtype}) to {final}: {len(description.params)} parameters, {description.keys} "
            f"tensors (optimizer state: {', '.join(description.optimizer_state) or 'none'}); load it with "
            f"engine.load_checkpoint({json.dumps(str(final.parent))})")
    return CommandResult(data, text)
