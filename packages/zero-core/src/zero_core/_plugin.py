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
    cli.add_command(
        "profile",
        help="train a model on local ranks at each ZeRO stage: memory per phase and category, measured beside "
             "the estimate, every gap explained",
        add_arguments=_profile_arguments,
        run=_run_profile,
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
    _add_trust_flag(inspect)
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
    export.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty OUT that no export wrote, replacing only the files the export "
                             "writes (an earlier export's OUT needs no flag)")
    _add_trust_flag(export)
    add_action_json_flag(export)
    imported = actions.add_parser(
        "import", help="convert a DeepSpeed checkpoint (stages 1-3, any world size) into a zero checkpoint",
        description="Read one tag of a DeepSpeed 0.19.8 checkpoint (ZeRO 1-3, fp32/bf16/fp16, any number of ranks) "
                    "and write OUT/<tag> as a zero checkpoint; needs no DeepSpeed.")
    imported.add_argument("dir", metavar="DS_DIR", help="DeepSpeed's save_dir, or one of its tag directories")
    imported.add_argument("out", metavar="OUT", help="the zero save_dir to write into (created if needed)")
    imported.add_argument("--tag", help="the DeepSpeed tag to import (default: the one `latest` names)")
    _add_trust_flag(imported)
    add_action_json_flag(imported)


def _add_trust_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-checkpoint", action="store_true",
                        help="read pickled objects the trust model refuses (objects of other classes), which runs "
                             "what they name: only for checkpoints from a source you trust (docs/checkpoints.md)")


def _run_checkpoint(args: argparse.Namespace) -> CommandResult:
    from .checkpoint import checkpoint_command

    return checkpoint_command(args)


def _profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Launch NPROC local ranks, build MODEL from its Hugging Face config with random weights (nothing is "
        "downloaded), train STEPS steps at each stage with the engine's memory tracking on, and print per phase "
        "(after init, forward, backward, step) and per category the measured memory beside zero-estimate's, the "
        "error, and the cause of every gap above 5%. docs/profile.md")
    parser.add_argument("--model", required=True, metavar="PRESET_OR_CONFIG",
                        help="pythia-tiny, llama-tiny, gpt2-tiny, or a config.json (or its folder)")
    parser.add_argument("--ds-config", metavar="DS.json", help="the DeepSpeed ds_config (default: bf16 AdamW)")
    parser.add_argument("--nproc", type=int, default=2, help="local ranks (default 2)")
    parser.add_argument("--stages", metavar="S,S", help="ZeRO stages to run, e.g. 2,3 (default: the config's)")
    parser.add_argument("--memory-efficient-linear", choices=("true", "false", "both"),
                        help="stage 3: the flag's value, or both runs (default: the config's)")
    parser.add_argument("--lora-rank", type=int, metavar="R", help="freeze the model, train LoRA adapters of rank R")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="checkpoint every layer (Hugging Face's gradient_checkpointing_enable, non-reentrant)")
    parser.add_argument("--micro-batch", type=int, metavar="B", help="default: the config's micro-batch, or 1")
    parser.add_argument("--seq-len", type=int, default=128, metavar="S", help="tokens per sample (default 128)")
    parser.add_argument("--steps", type=int, default=3, metavar="K", help="training steps per stage (default 3)")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="stop the ranks after this long (default 900)")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")


def _run_profile(args: argparse.Namespace) -> CommandResult:
    from .profile import profile_command

    return profile_command(args)
