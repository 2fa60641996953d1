"""The body of `zero checkpoint import DS_DIR OUT [--tag T]`: a DeepSpeed checkpoint rewritten as a zero one.

Its arguments are declared with the other `zero checkpoint` actions' (zero_core._plugin), where building
the parser imports no torch.
"""
from __future__ import annotations

import argparse
import json

from zero_plugins import CommandResult


def import_command(args: argparse.Namespace) -> CommandResult:
    from ._describe import Description
    from ._deepspeed import import_deepspeed_checkpoint

    final = import_deepspeed_checkpoint(args.dir, args.out, args.tag, trust_checkpoint=args.trust_checkpoint)
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
