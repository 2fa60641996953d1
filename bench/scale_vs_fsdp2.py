"""Bytes per parameter at scale: zero's dry run beside torch's FSDPMemTracker on FSDP2, Pythia-6.9B by default.

    .venv/bin/python bench/scale_vs_fsdp2.py [--model pythia-6.9b] [--nproc 4,8] [--checkpointing on,off]
        [--seq-len 2048] [--zero-variants default,step_in_backward,all_partitioned] [--ds-config DS.json]

Full fine-tuning in bf16 with AdamW (lr 1e-4), micro-batch 1 x SEQ_LEN tokens, eager attention, for each number
of ranks and with and without gradient checkpointing on every layer (non-reentrant):

- zero: `zero profile --dry-run` at stage 3 (the engine on fake CUDA tensors under a fake process group; 2 steps,
  the second measured), once per variant of the ds_config. A variant lays its keys over the base config
  (--ds-config, default: bf16 and AdamW, DeepSpeed's defaults otherwise); a variant the engine refuses is shown
  as "n/a (refused: ...)". Its peak is rank 0's allocator peak and the phase where it falls.
- FSDP2: bench/_fsdp2_tracker.py, `fully_shard` on every layer and the root (bf16 compute, fp32 reduction,
  fp32 sharded weights), AdamW with foreach=True, traced by torch's FSDPMemTracker over 2 iterations on fake
  CPU tensors under a fake process group; the peak is the second iteration's.

Model states per parameter are bytes divided by P/N (P parameters, N ranks): zero's weights, gradients and
optimizer categories of the ledger at the phase where they are highest (the step, by default); FSDP2's sharded weights, sharded gradients and
optimizer state right after its step. The targets of the issue are checked below the table. Progress goes to
stderr; the markdown to stdout.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GIB = 1 << 30
TRACKER = Path(__file__).resolve().with_name("_fsdp2_tracker.py")
# zero profile's own default ds_config (docs/profile.md): the base each variant is laid over.
BASE_CONFIG: dict[str, Any] = {"bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    # the opt-in refuses clipping by the global norm, which needs every gradient before the first unit steps
    "step_in_backward": {"gradient_clipping": 0, "zero_optimization": {"stage": 3, "step_in_backward": True}},
    # DeepSpeed's default stage3_param_persistence_threshold keeps params of up to 1e5 elements whole on every rank
    # (FSDP2 shards every one): 0 partitions them all, which isolates that share of the model states
    "all_partitioned": {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}},
}
# The ledger's categories that are model states (docs/ledger.md); left out: the gathered weights and the reduce
# buckets (working sets), buffers, activations and `other` (the step's temporaries, reported on their own).
MODEL_STATES = ("param.partition", "param.persistent", "grad.full", "grad.partition", "optim.master", "optim.grad",
                "optim.state")
# The issue's targets: zero's peak over FSDP2's, by variant and checkpointing; model-state bytes per parameter.
RATIO_TARGETS = {("default", True): 0.90, ("step_in_backward", True): 0.80, ("all_partitioned", True): 0.90,
                 ("default", False): 1.00, ("step_in_backward", False): 1.00, ("all_partitioned", False): 1.00}
BYTES_TARGETS = {"default": 16.0, "step_in_backward": 12.0, "all_partitioned": 16.0}
# A 6.9B dry run takes minutes on a loaded 2-core machine; zero profile's own default (900 s) is too short.
DRY_RUN_TIMEOUT_S = 4 * 3600


def _progress(message: str) -> None:
    print(f"scale_vs_fsdp2: {message}", file=sys.stderr, flush=True)


def _merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        merged[key] = _merged(merged.get(key, {}), value) if isinstance(value, dict) else value
    return merged


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def parameter_count(preset: str) -> int:
    """P: the preset's parameters, built on the meta device as zero profile and the tracker build it."""
    import torch
    from transformers import AutoModelForCausalLM
    from zero_core.profile._models import model_config, transformers_config

    with torch.device("meta"):
        model: torch.nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            transformers_config(model_config(preset)))
    return sum(param.numel() for param in model.parameters())


def zero_dry_run(preset: str, nproc: int, seq_len: int, checkpointing: bool, config: dict[str, Any],
                 workdir: Path) -> dict[str, Any] | str:
    """zero profile --dry-run's JSON report, or the line with which it refused the config."""
    config_file = workdir / "ds_config.json"
    config_file.write_text(json.dumps(config))
    command = [sys.executable, "-m", "zero_cli", "profile", "--dry-run", "--model", preset, "--nproc", str(nproc),
               "--stages", "3", "--micro-batch", "1", "--seq-len", str(seq_len), "--steps", "2", "--attention",
               "eager", "--ds-config", str(config_file), "--timeout", str(DRY_RUN_TIMEOUT_S), "--json"]
    if checkpointing:
        command.append("--gradient-checkpointing")
    # stdout to a file: the report can outgrow a pipe while stderr is still being read.
    with tempfile.TemporaryFile("w+") as report:
        process = subprocess.Popen(command, stdout=report, stderr=subprocess.PIPE, text=True, env=_env())
        assert process.stderr is not None
        said = []
        for line in process.stderr:  # zero's progress, passed on as it comes
            sys.stderr.write(line)
            said.append(line.rstrip())
        if process.wait() == 2:  # a refusal: one line, before anything runs (docs/profile.md)
            return next((line for line in reversed(said) if line), "no reason given").removeprefix("zero: error: ")
        if process.returncode != 0:
            raise SystemExit(f"zero profile --dry-run failed ({process.returncode}):\n" + "\n".join(said[-40:]))
        report.seek(0)
        result: dict[str, Any] = json.load(report)
        return result


def fsdp2_trace(preset: str, nproc: int, seq_len: int, checkpointing: bool) -> dict[str, Any]:
    command = [sys.executable, str(TRACKER), "--model", preset, "--nproc", str(nproc), "--seq-len", str(seq_len)]
    if checkpointing:
        command.append("--checkpointing")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, env=_env())  # stderr: progress
    if done.returncode != 0:
        raise SystemExit(f"bench/_fsdp2_tracker.py failed ({done.returncode}); its traceback is above")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _model_states(phases: dict[str, Any]) -> tuple[str, int]:
    """The phase where zero's model states are highest, and their bytes there: the step phase by default; an
    engine that steps inside backward may have no step phase (its figures null)."""
    held = {phase: sum(figures["measured"].get(category, 0) for category in MODEL_STATES)
            for phase, figures in phases.items() if figures["measured"] is not None}
    at = max(held, key=lambda phase: held[phase])
    return at, held[at]


def _holds(value: float, target: float) -> str:
    return f"{value:.3f} {'≤' if value <= target else '>'} {target:.2f}: {'holds' if value <= target else 'misses'}"


def _list(parse: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda text: [parse(item.strip()) for item in text.split(",") if item.strip()]


def _switch(text: str) -> list[bool]:
    values = {"on": [True], "off": [False], "both": [True, False]}
    if text not in values:
        raise argparse.ArgumentTypeError(f"{text!r}: on, off or both")
    return values[text]


def _checkpointing(text: str) -> list[bool]:
    return list(dict.fromkeys(value for item in text.split(",") for value in _switch(item.strip())))


def _variants(text: str) -> list[str]:
    names: list[str] = _list(str)(text)
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or text!r}: variants are {', '.join(VARIANTS)}")
    return names


def main() -> None:
    from zero_core.profile._models import preset_names

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="pythia-6.9b", help="a zero profile preset (pythia-tiny for a smoke run)")
    parser.add_argument("--nproc", type=_list(int), default=[4, 8], help="ranks, comma-separated (default 4,8)")
    parser.add_argument("--checkpointing", type=_checkpointing, default=[True, False],
                        help="on, off or both, comma-separated (default both)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--zero-variants", type=_variants, default=list(VARIANTS),
                        help=f"ds_config variants of zero's run (default {','.join(VARIANTS)})")
    parser.add_argument("--ds-config", type=Path, help="the base ds_config of zero's variants (default: bf16, AdamW)")
    args = parser.parse_args()
    if args.model not in preset_names():
        parser.error(f"--model: {args.model} is not among {', '.join(preset_names())}")
    base = json.loads(args.ds_config.read_text()) if args.ds_config else BASE_CONFIG

    started = time.monotonic()
    parameters = parameter_count(args.model)
    rows, targets, notes = [], [], []
    traced: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for nproc in args.nproc:
            share = parameters / nproc  # P/N: the parameters of one rank's shard
            for checkpointing in args.checkpointing:
                setting = f"{nproc} ranks, checkpointing {'on' if checkpointing else 'off'}"
                _progress(f"{setting}: FSDP2 under FSDPMemTracker ({time.monotonic() - started:.0f} s)")
                fsdp2 = fsdp2_trace(args.model, nproc, args.seq_len, checkpointing)
                traced["FSDP2"] = f"fake {fsdp2['device']} tensors"
                fsdp2_peak = fsdp2["peak"]["bytes"]
                fsdp2_states = fsdp2["model_states_after_step"] / share
                fsdp2_cell = f"{fsdp2_peak / GIB:.3f} ({fsdp2['peak']['phase']})"
                first = fsdp2["first_iteration_peak"]
                notes.append(f"{setting}: FSDP2's first iteration (not counted) peaked at {first['bytes'] / GIB:.3f} "
                             f"GiB in its {first['phase']}")
                for variant in args.zero_variants:
                    _progress(f"{setting}: zero, {variant} ({time.monotonic() - started:.0f} s)")
                    zero = zero_dry_run(args.model, nproc, args.seq_len, checkpointing,
                                        _merged(base, VARIANTS[variant]), Path(workdir))
                    head = f"| {nproc} | {'on' if checkpointing else 'off'} | {variant} |"
                    if isinstance(zero, str):
                        rows.append(f"{head} n/a (refused: {zero}) | {fsdp2_cell} | n/a | n/a | n/a | "
                                    f"{fsdp2_states:.2f} |")
                        targets.append(f"{head} n/a | n/a |")
                        continue
                    traced["zero"] = f"fake tensors standing for {zero['dry_run']['device']}"
                    measured = zero["settings"][0]
                    peak = measured["peak"]["measured"]
                    at, states = _model_states(measured["phases"])
                    other = measured["phases"][at]["measured"].get("other", 0)
                    ratio = peak["bytes"] / fsdp2_peak
                    rows.append(f"{head} {peak['bytes'] / GIB:.3f} ({peak['phase']}) | {fsdp2_cell} | {ratio:.3f} | "
                                f"{states / share:.3f} ({at}) | {other / share:.3f} | {fsdp2_states:.3f} |")
                    targets.append(f"{head} {_holds(ratio, RATIO_TARGETS[variant, checkpointing])} | "
                                   f"{_holds(states / share, BYTES_TARGETS[variant])} |")
                    notes.append(f"{setting}, {variant}: zero's step ran {measured['optimizer_kernel']}")

    print(f"{args.model} ({parameters:,} parameters), full fine-tuning, bf16, AdamW, micro-batch 1 x {args.seq_len} "
          "tokens, eager attention, stage 3 / FSDP2\n")
    print("| nproc | checkpointing | zero variant | zero peak GiB (phase) | FSDP2 peak GiB (phase) | zero / FSDP2 | "
          "zero model states B/param (phase) | zero other B/param | FSDP2 model states B/param |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    print("\nTargets: zero / FSDP2 ≤ 0.90 with checkpointing (≤ 0.80 with step_in_backward), ≤ 1.00 without; "
          "zero's model states ≤ 16 B/param (≤ 12 with step_in_backward).\n")
    print("| nproc | checkpointing | zero variant | zero / FSDP2 | zero model states |")
    print("| ---: | --- | --- | --- | --- |")
    print("\n".join(targets))
    print(f"\nB/param: bytes per parameter of one rank's shard, P/N. zero's model states: {', '.join(MODEL_STATES)} "
          "at the peak of the phase where they are highest; `other` there is the step's temporaries when that is "
          "the step. FSDP2's model states: Sharded Param, "
          "Sharded Grad and OptState right after optimizer.step(). FSDP2 runs AdamW with foreach=True and steps "
          "all parameters at once, so its foreach temporary (the list of sqrt(v)) is 4P/N bytes: 4 B/param.")
    print("- FSDP2's first iteration is left out, as zero's first step is: AdamW creates its state there, and on "
          "fake tensors the tracker also counts the whole-size tensors DTensor's sharding propagation makes for it "
          "(on real tensors they are never allocated)")
    print("\n".join(f"- {note}" for note in notes))
    print(f"- traced on: {'; '.join(f'{side}: {device}' for side, device in traced.items())} (a CPU build of torch "
          "cannot run autograd on fake CUDA tensors; FSDPMemTracker counts CPU bytes exactly, CUDA's in 512-byte "
          "blocks)")
    print(f"- wall time: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
