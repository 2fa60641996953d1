"""`zero estimate` and `zero plan`: argument wiring, output, and one-line errors with exit status 2."""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from zero_plugins import CommandResult

from . import _cli_args, _ds_config, _report, _verify_cli
from ._ds_write import WrittenConfig, complete_ds_config, save_ds_config
from ._errors import EstimateError
from ._estimate import Estimate, estimate
from ._plan import Candidate, Limits, plan
from ._verify_cli import Setup
from ._plan_report import plan_text
from ._settings import ZeroSettings
from ._spec import ModelSpec
from ._units import parse_size
from .stage3 import zero3_table
from .stage_1_and_2 import zero2_table

Run = Callable[[argparse.Namespace], "CommandResult | int"]


def usage_errors(run: Run) -> Run:
    """Bad input is one line on stderr and exit status 2, as for argparse's own usage errors."""

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> CommandResult | int:
        try:
            return run(args)
        except EstimateError as error:
            print(f"zero: error: {_cli_args.flagged(error)}", file=sys.stderr)
            return 2

    return wrapped


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    _cli_args.add_model_arguments(parser)
    _cli_args.add_setup_arguments(parser)
    parser.add_argument(
        "--stage",
        metavar="S,S",
        help="stages to estimate, e.g. 2,3 (default: --ds-config's, or all that the offload allows)",
    )
    parser.add_argument("--explain", action="store_true", help="show every copy's formula with the numbers put in")
    parser.add_argument("--ds-compat", action="store_true", help="print DeepSpeed's estimator tables instead")
    parser.add_argument("--additional-buffer-factor", metavar="X", default="1.5", help="--ds-compat only (default 1.5)")


@usage_errors
def run_estimate(args: argparse.Namespace) -> CommandResult:
    model = _cli_args.model_from_args(args)
    cluster = _cli_args.cluster_from_args(args)
    if args.ds_compat:
        return _ds_compat(model, cluster.gpus_per_node, cluster.nodes, args.additional_buffer_factor)
    base_training, base_zero = _cli_args.ds_settings_from_args(args, cluster) or (None, None)
    training = _cli_args.training_from_args(args, model, base_training)
    results = [
        estimate(model, cluster, training, _cli_args.zero_from_args(args, stage, base_zero))
        for stage in _stages(args, base_zero)
    ]
    data = {
        "model": _model_dict(model),
        "gpus_per_node": cluster.gpus_per_node,
        "nodes": cluster.nodes,
        "seq_len": results[0].seq_len,
        "estimates": [result.as_dict() for result in results],
    }
    return CommandResult(data, _report.report_text(results, with_explain=args.explain))


def _stages(args: argparse.Namespace, ds_zero: ZeroSettings | None) -> list[int]:
    """--stage; without it, the ds_config's stage, or every stage the offload flags allow."""
    if args.stage is None and ds_zero is not None:
        return [ds_zero.stage]
    if args.stage is None:
        if args.offload_param not in (None, "none"):
            return [3]
        return [1, 2, 3] if args.offload_optimizer not in (None, "none") else [0, 1, 2, 3]
    stages = []
    for part in args.stage.split(","):
        if part.strip() not in ("0", "1", "2", "3"):
            raise EstimateError(f"{part.strip()!r} is not a stage; pass stages 0-3 separated by commas: 2,3", "stage")
        stages.append(int(part))
    return sorted(set(stages))


def _ds_compat(model: ModelSpec, gpus: int, nodes: int, factor_text: str) -> CommandResult:
    try:
        factor = float(factor_text)
    except ValueError:
        raise EstimateError(f"{factor_text!r} is not a number; pass e.g. 1.5", "additional_buffer_factor") from None
    rows2, text2 = zero2_table(model.total_params, gpus, nodes, factor)
    data: dict[str, object] = {"zero2": [row.as_dict() for row in rows2]}
    texts = [text2]
    if model.largest_layer_params is None:
        print("zero: note: the ZeRO-3 table needs --largest-layer (or --preset/--config)", file=sys.stderr)
    else:
        rows3, text3 = zero3_table(model.total_params, model.largest_layer_params, gpus, nodes, factor)
        data["zero3"] = [row.as_dict() for row in rows3]
        texts.append(text3)
    return CommandResult(data, "\n".join(texts))


def _model_dict(model: ModelSpec) -> dict[str, object]:
    return {
        "name": model.name,
        "total_params": model.total_params,
        "trainable_params": model.trainable_params,
        "largest_layer_params": model.largest_layer_params,
        "lora": None if model.lora is None else {"rank": model.lora.rank, "targets": list(model.lora.targets)},
    }


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_argument_group("limits")
    limits.add_argument("--gpu-memory", metavar="SIZE", help="memory of each GPU, e.g. 24GB (binary units); required")
    limits.add_argument("--cpu-memory", metavar="SIZE", help="host memory per node (default: not checked)")
    limits.add_argument("--nvme", metavar="SIZE", help="NVMe space per node; NVMe offload is tried only when given")
    output = parser.add_argument_group("output")
    output.add_argument("--write", metavar="PATH", help="write the top fitting configuration as a complete ds_config")
    output.add_argument("--force", action="store_true", help="with --write: replace an existing file")
    output.add_argument("--nvme-path", metavar="DIR", help="the NVMe offload directory written into ds_configs "
                        "(default: --ds-config's nvme_path)")
    _cli_args.add_model_arguments(parser)
    _cli_args.add_setup_arguments(parser, offload=False)
    _verify_cli.add_verify_arguments(parser)


@usage_errors
def run_plan(args: argparse.Namespace) -> CommandResult:
    if args.gpu_memory is None:
        raise EstimateError("required; pass the memory of each GPU, e.g. --gpu-memory 24GB", "gpu_memory")
    limits = Limits(
        parse_size(args.gpu_memory, "--gpu-memory"),
        None if args.cpu_memory is None else parse_size(args.cpu_memory, "--cpu-memory"),
        None if args.nvme is None else parse_size(args.nvme, "--nvme"),
    )
    model = _cli_args.model_from_args(args)
    cluster = _cli_args.cluster_from_args(args)
    base_training, base_zero = _cli_args.ds_settings_from_args(args, cluster) or (None, None)
    training = _cli_args.training_from_args(args, model, base_training)
    # Bucket sizes and bounds; the plan sets stage and offload (stage 3 allows any offload a ds_config gives).
    base = _cli_args.zero_from_args(args, 3, base_zero)
    base_ds = None if args.ds_config is None else _ds_config.load_ds_config(args.ds_config)
    if args.force and args.write is None:
        raise EstimateError("goes with --write PATH", "--force")
    if args.verify:
        return _plan_verified(args, model, Setup(cluster, limits, training, base), base_ds)
    _verify_cli.refuse_without_verify(args)
    result = plan(model, cluster, limits, training, base)
    if args.write is not None:
        if not result.fits:
            raise EstimateError("nothing fits the limits, so there is no configuration to write; nothing was "
                                "written", "--write")
        write_chosen(args, result.fits[0].estimate, base_ds)
    data = {
        "model": _model_dict(model),
        "gpus_per_node": cluster.gpus_per_node,
        "nodes": cluster.nodes,
        **result.as_dict(),
        # Each candidate with its complete ds_config, as --write would write it.
        **{key: [{**c.as_dict(), "ds_config": candidate_ds_config(c, base_ds, args.nvme_path)} for c in candidates]
           for key, candidates in (("fits", result.fits), ("misses", result.misses))},
    }
    return CommandResult(data, plan_text(result))


def _plan_verified(args: argparse.Namespace, model: ModelSpec, setup: Setup,
                   base_ds: dict[str, object] | None) -> CommandResult:
    """`zero plan --verify`: the search's report, and with --write the best verified configuration written."""
    if args.write is not None:
        _verify_cli.check_write_target(args.write, force=args.force)  # before the search, not after it
    verified = _verify_cli.run_verify(args, model, setup, base_ds)
    if args.write is not None:
        if verified.chosen is None:
            raise EstimateError("nothing verified fits, so there is no configuration to write; nothing was written "
                                "(the traces are cached: run again without --write to see the search)", "--write")
        write_chosen(args, verified.chosen, base_ds)
    data = {"model": _model_dict(model), "gpus_per_node": setup.cluster.gpus_per_node, "nodes": setup.cluster.nodes,
            "verify": verified.data}
    described = _report.describe(estimate(model, setup.cluster, setup.training, setup.zero))
    return CommandResult(data, f"{described}\n\n{verified.text}")


def write_chosen(args: argparse.Namespace, chosen: Estimate, base_ds: dict[str, object] | None) -> WrittenConfig:
    """--write: the chosen configuration's complete ds_config to args.write, and on stderr what DeepSpeed lacks
    and what the training script must match."""
    written = complete_ds_config(chosen, base_ds, nvme_path=args.nvme_path)
    save_ds_config(written, args.write, force=args.force)
    zero = chosen.zero
    print(f"zero: wrote {args.write}: stage {zero.stage}, offload {zero.label()}", file=sys.stderr)
    if written.keys_deepspeed_lacks:
        print(f"zero: note: DeepSpeed 0.19.8 lacks {', '.join(written.keys_deepspeed_lacks)} (listed in the file's "
              "keys_deepspeed_lacks); delete them to run it under DeepSpeed", file=sys.stderr)
    for note in written.notes:
        print(f"zero: note: the config assumes {note}", file=sys.stderr)
    return written


def candidate_ds_config(
    candidate: Candidate, base_ds: dict[str, object] | None, nvme_path: str | None
) -> dict[str, object]:
    """--json: a candidate's complete ds_config, or why it cannot be written (NVMe offload without a path)."""
    try:
        return complete_ds_config(candidate.estimate, base_ds, nvme_path=nvme_path).as_dict()
    except EstimateError as error:
        return {"config": None, "error": str(error)}
