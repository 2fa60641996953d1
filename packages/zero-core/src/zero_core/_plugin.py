"""zero-core's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the classes, the report and the checkpoint commands are imported inside
the hooks and commands.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import CommandResult, CommandTable, add_action_json_flag, hookimpl

if TYPE_CHECKING:
    from .accelerator import Accelerator


@hookimpl
def zero_register_accelerators(register: Callable[[str, type[Accelerator]], None]) -> None:
    from .accelerator.cpu import CpuAccelerator
    from .accelerator.cuda import CudaAccelerator

    register("cpu", CpuAccelerator)
    register("cuda", CudaAccelerator)


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    cli.add_command(
        "report",
        help="environment report, like ds_report: python, torch, accelerators, pin backends, build tools, "
             "plugins' sections (swap backends), plugins",
        run=_run_report,
    )
    cli.add_command(
        "checkpoint",
        help="inspect a save_dir's checkpoints (inspect), or write one as a Hugging Face model directory (export)",
        add_arguments=_checkpoint_arguments,
        run=_run_checkpoint,
    )


def _run_report(args: argparse.Namespace) -> CommandResult:
    from .report import build_report

    return build_report()


def _checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    # Here, not in zero_core.checkpoint: building the parser must not import torch.
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = actions.add_parser(
        "inspect", help="each tag: world size and stage saved at, dtype, completeness, tensors and bytes by category",
        description="List the checkpoints in DIR (the save_dir given to engine.save_checkpoint) and which one "
                    "`latest` names; per tag: the world size and stage it was saved at, the compute dtype, whether "
                    "it is complete, its parameters, and its tensors and bytes by category. Reads no tensor data; "
                    "exits 1 if a checkpoint is incomplete.")
    inspect.add_argument("dir", metavar="DIR", help="the save_dir given to engine.save_checkpoint")
    inspect.add_argument("--tag", help="only this tag")
    add_action_json_flag(inspect)
    export = actions.add_parser(
        "export", help="write a checkpoint's weights as safetensors shards that from_pretrained loads",
        description="Write a checkpoint's weights to OUT as a Hugging Face model directory: safetensors shards "
                    "(with model.safetensors.index.json) or one model.safetensors, under the model's own parameter "
                    "names and shapes, and the model's config.json where the checkpoint has one. Trainable "
                    "parameters come from their fp32 master copy. Reads one tensor at a time.")
    export.add_argument("dir", metavar="DIR", help="the save_dir given to engine.save_checkpoint")
    export.add_argument("out", metavar="OUT", help="the directory to write (created if needed)")
    export.add_argument("--tag", help="the checkpoint to export (default: the one `latest` names)")
    export.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="dtype of the written weights (default fp32)")
    export.add_argument("--max-shard-size", default="2GB", help="largest shard, as Hugging Face's (default 2GB)")
    add_action_json_flag(export)
    imported = actions.add_parser(
        "import", help="convert a DeepSpeed checkpoint (stages 1-3, any world size) into a zero checkpoint",
        description="Read one tag of a DeepSpeed 0.19.8 checkpoint (ZeRO 1-3, fp32/bf16/fp16, any number of ranks) "
                    "and write OUT/<tag> as a zero checkpoint; needs no DeepSpeed.")
    imported.add_argument("dir", metavar="DS_DIR", help="DeepSpeed's save_dir, or one of its tag directories")
    imported.add_argument("out", metavar="OUT", help="the zero save_dir to write into (created if needed)")
    imported.add_argument("--tag", help="the DeepSpeed tag to import (default: the one `latest` names)")
    add_action_json_flag(imported)


def _run_checkpoint(args: argparse.Namespace) -> CommandResult:
    from .checkpoint import checkpoint_command

    return checkpoint_command(args)
