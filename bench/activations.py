"""Activation levers on the bench model: the ledger's measured `activations` peaks next to zero-estimate's.

    .venv/bin/python bench/activations.py [--precision fp32,bf16] [--stages 2,3]

On 2 gloo ranks (tests/multirank.py's run_ranks: fresh spawned processes, torchrun's environment,
OMP_NUM_THREADS=1) each rank builds the *_vs_peers benches' GPT-NeoX (hidden 256, 4 layers, 8 heads,
vocab 8192, eager attention, no dropout; seq 128, micro-batch 2), runs `zero_core.initialize` at each
stage, turns the engine's memory tracking on and takes 2 steps, once per lever:
- none: no checkpointing;
- torch: every layer, `gradient_checkpointing_enable(use_reentrant=False)`;
- ours: every layer, `zero_core.checkpointing.checkpoint` (DeepSpeed's reentrant checkpoint);
- ours+cpu: the same with the ds_config's `activation_checkpointing: {cpu_checkpointing: true}`;
- offload: no checkpointing, `zero_core.checkpointing.offload_saved_activations` of the 4 layers.

Measured, rank 0: the ledger's `activations` peak on the device (`cpu`, tracking on), and at `host.pinned` and
`host` (the checkpointed inputs' host copies). Predicted: zero-estimate's activation lines for
`from_module(model)` with the same precision, seq, micro-batch and lever (`full` checkpointing for every
checkpointed lever, `offload_activations` for offload), the largest sum held at one instant (the loss, or a
layer running) on the GPU and at host.pinned, as the ledger's category peak is. Each checkpointed
row also shows the reduction against `none`, measured and predicted, and their ratio; the estimator's
per-term view of the model (2sbh per checkpointed input, A_layer, logits) is printed below the table
together with the measured stored inputs, so a gap can be traced to a term.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # multirank

MiB = 1024 * 1024
LEVERS = ("none", "torch", "ours", "ours+cpu", "offload")
HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 256, 4, 8, 8192, 128, 2


def make_model(precision: str) -> Any:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, intermediate_size=4 * HIDDEN,
                           max_position_embeddings=SEQ, attn_implementation="eager")
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config)
    model.train()
    return model.to(torch.bfloat16) if precision == "bf16" else model


def ds_config(stage: int, precision: str, lever: str, world_size: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": BATCH,
        "train_batch_size": BATCH * world_size,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": precision == "bf16"},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.0, "torch_adam": True}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 2_000_000,
                              "stage3_param_persistence_threshold": 10_000,
                              "stage3_prefetch_bucket_size": 2_000_000},
    }
    if lever == "ours+cpu":
        config["activation_checkpointing"] = {"cpu_checkpointing": True}
    return config


def enable(model: Any, lever: str) -> Any:
    """Turn the lever on; returns what undoes it (offload's handle: `.remove()`), else None."""
    import zero_core

    if lever == "offload":
        return zero_core.checkpointing.offload_saved_activations(model.gpt_neox.layers, min_bytes=1024)
    if lever == "torch":
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif lever.startswith("ours"):
        model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=zero_core.checkpointing.checkpoint)
    return None


def predicted(model: Any, stage: int, precision: str, lever: str) -> dict[str, Any]:
    """zero-estimate's activation lines for this setting: GPU and host.pinned peaks, and each line."""
    del stage  # ZeRO partitions no activations: every stage has the same lines
    import zero_estimate as ze
    from zero_estimate._activations import activation_lines

    training = ze.Training(precision=precision, seq_len=SEQ, micro_batch=BATCH, attention="eager",
                           checkpointing="none" if lever in ("none", "offload") else "full",
                           cpu_checkpointing=lever == "ours+cpu", offload_activations=lever == "offload")
    spec = ze.from_module(model)
    # The ledger's figure is the `activations` category's own peak, wherever the phase's total peaked, so the
    # prediction is taken from the activation lines before each phase keeps only its peak instant's lines.
    assert spec.shape is not None
    lines = activation_lines(spec.shape, training, SEQ)

    def peak(where: str) -> int:
        return max(sum(line.bytes for line in lines
                       if line.location == where and phase in line.phases and line.instant in ("", "held", instant))
                   for phase in ("forward", "backward") for instant in ("loss", "late"))

    return {
        "gpu": peak("gpu"),
        "host.pinned": peak("host.pinned"),
        "lines": [(line.location, line.what, line.formula, line.bytes) for line in lines],
    }


def _measure(rank: int, world_size: int, stages: list[int], precisions: list[str]) -> dict[str, Any]:
    import torch

    import zero_core
    from zero_core.checkpointing import unconfigure

    generator = torch.Generator().manual_seed(1000 + rank)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator) for _ in range(2)]
    results: dict[str, Any] = {}
    for precision in precisions:
        for stage in stages:
            for lever in LEVERS:
                unconfigure()
                model = make_model(precision)
                prediction = predicted(model, stage, precision, lever)
                handle = enable(model, lever)
                engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(stage, precision, lever,
                                                                                      world_size))
                engine.track_memory(True)
                losses = _steps(engine, data)
                engine.track_memory(False)
                peaks = _activation_peaks(engine)
                engine.destroy()
                if handle is not None:
                    handle.remove()
                untracked = None
                if lever == "ours+cpu":
                    # With tracking on, the host copies are first seen by the storage tracker (made in forward)
                    # and stay filed at the device: measure the host lines again with tracking off.
                    unconfigure()
                    model = make_model(precision)
                    enable(model, lever)
                    engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(stage, precision, lever,
                                                                                          world_size))
                    _steps(engine, data)
                    untracked = _activation_peaks(engine)
                    engine.destroy()
                results[f"{precision}/{stage}/{lever}"] = {"measured": peaks, "untracked": untracked,
                                                           "predicted": prediction, "losses": losses}
    unconfigure()
    return results


def _steps(engine: Any, data: list[Any]) -> list[float]:
    losses = []
    for batch in data:
        loss = engine(input_ids=batch, labels=batch).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def _activation_peaks(engine: Any) -> dict[str, int]:
    """The ledger's `activations` peak at each location."""
    return {where: rows.get("activations", {}).get("peak", 0) for where, rows in engine.memory_report().items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--stages", default="2,3", help="comma-separated ZeRO stages")
    args = parser.parse_args()
    precisions, stages = args.precision.split(","), [int(s) for s in args.stages.split(",")]
    from multirank import run_ranks

    per_rank = run_ranks(_measure, 2, stages, precisions, timeout=900)
    r0 = per_rank[0]
    device = "cpu"  # the CPU accelerator's device type: the ledger's device line
    print(f"GPT-NeoX hidden {HIDDEN}, {LAYERS} layers, {HEADS} heads, vocab {VOCAB}, eager attention; "
          f"seq {SEQ} x micro-batch {BATCH}; 2 gloo ranks, 2 steps; rank 0's ledger peaks of `activations`")
    header = (f"{'prec':<5}{'stage':>6}  {'lever':<9}{'measured dev':>14}{'predicted gpu':>15}"
              f"{'meas host':>12}{'pred host':>12}{'meas cut':>12}{'pred cut':>12}{'ratio':>7}")
    print(header)
    print("-" * len(header))
    for precision in precisions:
        for stage in stages:
            base = r0[f"{precision}/{stage}/none"]
            for lever in LEVERS:
                r = r0[f"{precision}/{stage}/{lever}"]
                m, p = r["measured"], r["predicted"]
                host_lines = r["untracked"] or m  # ours+cpu: the untracked run's (see _measure)
                host = host_lines.get("host.pinned", 0) + host_lines.get("host", 0)
                cut_m = base["measured"][device] - m[device]
                cut_p = base["predicted"]["gpu"] - p["gpu"]
                cuts = (f"{cut_m / MiB:>8.3f} MiB{cut_p / MiB:>8.3f} MiB{cut_m / cut_p:>7.2f}" if lever != "none"
                        else f"{'':>12}{'':>12}{'':>7}")
                print(f"{precision:<5}{stage:>6}  {lever:<9}{m[device] / MiB:>10.3f} MiB{p['gpu'] / MiB:>11.3f} MiB"
                      f"{host / MiB:>8.3f} MiB{p['host.pinned'] / MiB:>8.3f} MiB{cuts}")
    print("\nhost lines of ours+cpu, bytes (rank 0): `activations` peak at host.pinned / host, predicted host.pinned")
    for precision in precisions:
        for stage in stages:
            r = r0[f"{precision}/{stage}/ours+cpu"]
            tracked, untracked = r["measured"], r["untracked"]
            print(f"  {precision} stage {stage}: tracking off {untracked.get('host.pinned', 0):,} / "
                  f"{untracked.get('host', 0):,} B; tracking on {tracked.get('host.pinned', 0):,} / "
                  f"{tracked.get('host', 0):,} B; predicted {r['predicted']['host.pinned']:,} B")
    # Both peaks fall at the loss (the estimator's instants): none's holds n layers, torch's the n inputs.
    print("\nper term, rank 0, stage 2, torch: one layer A = (cut + n * input) / n, input = the host line's"
          " bytes / n;\nthe rest (logits, loss, embedding) = none's peak - n * A; each against the estimator's term")
    for precision in precisions:
        none, ckpt = r0[f"{precision}/2/none"], r0[f"{precision}/2/torch"]
        stored = r0[f"{precision}/2/ours+cpu"]["untracked"]
        inputs = stored.get("host.pinned", 0) + stored.get("host", 0)
        layer = (none["measured"][device] - ckpt["measured"][device] + inputs) / LAYERS
        rest = none["measured"][device] - LAYERS * layer
        lines = {what.split(" (")[0].split(",")[0]: size for _, what, _, size in ckpt["predicted"]["lines"]}
        p_layer = lines["one layer's activations"]
        p_rest = none["predicted"]["gpu"] - LAYERS * p_layer
        p_input = lines["checkpointed layer inputs"] // LAYERS
        print(f"  {precision}: input {inputs // LAYERS:,} B (predicted {p_input:,}); A {layer:,.0f} B (predicted "
              f"{p_layer:,}, x{layer / p_layer:.3f}); rest {rest:,.0f} B (predicted logits and loss {p_rest:,}, "
              f"{rest - p_rest:+,.0f} B = {(rest - p_rest) / (SEQ * BATCH * VOCAB):+.2f} * s*b*V)")
    print("\nthe estimator's activation lines (stage 2):")
    for precision in precisions:
        for lever in LEVERS:
            for where, what, formula, size in r0[f"{precision}/2/{lever}"]["predicted"]["lines"]:
                print(f"  {precision} {lever:<9}{where:<12}{size:>12,} B  {formula}  ({what})")
    worst = max(abs(a - b) / abs(b) for key in r0 for a, b in zip(r0[key]["losses"], r0[key.rsplit("/", 1)[0]
                                                                                    + "/none"]["losses"]))
    print(f"\nworst relative loss difference to the run without checkpointing (rank 0): {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
