"""`zero checkpoint`'s arguments, beside its body (_cli.py).

A module of its own because building the parser must import no torch, and _cli.py's imports do.
"""
from __future__ import annotations

import argparse

from zero_plugins import add_action_json_flag


_SAVE_DIR = "the save_dir given to engine.save_checkpoint"


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """`zero checkpoint`'s actions (inspect, export, import) and their flags."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = _action(
        actions, "inspect", ("DIR", _SAVE_DIR),
        "each tag: world size and stage saved at, dtype, completeness, tensors and bytes by category",
        "List the checkpoints in DIR (the save_dir given to engine.save_checkpoint) and which one `latest` names; "
        "per tag: the world size and stage it was saved at, the compute dtype, whether it is complete, its "
        "parameters, and its tensors and bytes by category. Reads no tensor data; exits 1 if a checkpoint is "
        "incomplete.")
    inspect.add_argument("--tag", help="only this tag")
    export = _action(
        actions, "export", ("DIR", _SAVE_DIR),
        "write a checkpoint's weights as safetensors shards that from_pretrained loads",
        "Write a checkpoint's weights to OUT as a Hugging Face model directory: safetensors shards (with "
        "model.safetensors.index.json) or one model.safetensors, under the model's own parameter names and shapes, "
        "and the model's config.json where the checkpoint has one. Trainable parameters come from their fp32 "
        "master copy. Reads one tensor at a time.")
    export.add_argument("out", metavar="OUT", help="the directory to write (created if needed)")
    export.add_argument("--tag", help="the checkpoint to export (default: the one `latest` names)")
    export.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="dtype of the written weights (default fp32)")
    export.add_argument("--max-shard-size", default="2GB", help="largest shard, as Hugging Face's (default 2GB)")
    export.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty OUT that no export wrote, replacing only the files the export "
                             "writes (an earlier export's OUT needs no flag)")
    imported = _action(
        actions, "import", ("DS_DIR", "DeepSpeed's save_dir, or one of its tag directories"),
        "convert a DeepSpeed checkpoint (stages 1-3, any world size) into a zero checkpoint",
        "Read one tag of a DeepSpeed 0.19.8 checkpoint (ZeRO 1-3, fp32/bf16/fp16, any number of ranks) and write "
        "OUT/<tag> as a zero checkpoint; needs no DeepSpeed.")
    imported.add_argument("out", metavar="OUT", help="the zero save_dir to write into (created if needed)")
    imported.add_argument("--tag", help="the DeepSpeed tag to import (default: the one `latest` names)")


def _action(actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, directory: tuple[str, str],
            summary: str, description: str) -> argparse.ArgumentParser:
    """One action: its directory argument (metavar, help), and the flags every action takes (--trust-checkpoint,
    --json)."""
    parser = actions.add_parser(name, help=summary, description=description)
    metavar, help_text = directory
    parser.add_argument("dir", metavar=metavar, help=help_text)
    parser.add_argument("--trust-checkpoint", action="store_true",
                        help="read pickled objects the trust model refuses (objects of other classes), which runs "
                             "what they name: only for checkpoints from a source you trust (docs/checkpoints.md)")
    add_action_json_flag(parser)
    return parser
