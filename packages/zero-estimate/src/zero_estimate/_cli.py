"""`zero estimate` and `zero plan`: argument wiring, output, and one-line errors with exit status 2."""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from zero_plugins import CommandResult

from . import _cli_args, _ds_config, _report, _verify_cli
from ._errors import EstimateError
from ._estimate import estimate
from ._plan import Limits, plan
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
    if args.verify:
        given = None if args.ds_config is None else _ds_config.load_ds_config(args.ds_config)
        verified = _verify_cli.run_verify(args, model, cluster, limits, training, base, given)
        text = verified.pop("text")
        data = {"model": _model_dict(model), "gpus_per_node": cluster.gpus_per_node, "nodes": cluster.nodes,
                "verify": verified}
        return CommandResult(data, f"{_report.describe(estimate(model, cluster, training, base))}\n\n{text}")
    result = plan(model, cluster, limits, training, base)
    data = {
        "model": _model_dict(model),
        "gpus_per_node": cluster.gpus_per_node,
        "nodes": cluster.nodes,
        **result.as_dict(),
    }
    return CommandResult(data, plan_text(result))
