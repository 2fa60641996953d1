"""A DeepSpeed training script, written against DeepSpeed's API only: `python deepspeed_train.py --deepspeed_config
ds.json --save_dir DIR` under a launcher runs it with DeepSpeed; tests/integration/test_deepspeed_script.py calls
`main(deepspeed, argv)` with `zero_core` as `deepspeed` and with DeepSpeed itself, and compares what it returns.

It uses what scripts use: add_config_arguments and initialize(args=...), deepspeed.zero.Init and
GatheredParameters, deepspeed.comm, get_accelerator(), set_gradient_accumulation_boundary to step at an epoch's
end after an odd number of micro-batches, save_checkpoint/load_checkpoint with client state, save_16bit_model,
and deepspeed.utils.zero_to_fp32.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

EPOCHS = 2
MICRO_BATCHES_PER_EPOCH = 3  # not a multiple of gradient_accumulation_steps (2): each epoch ends on a forced step


def build_model(seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def main(deepspeed: ModuleType, argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="a DeepSpeed script")
    parser.add_argument("--save_dir", required=True)
    parser.add_argument("--seed", type=int, default=11)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args(argv)

    get_accelerator = importlib.import_module(f"{deepspeed.__name__}.accelerator").get_accelerator
    accelerator = get_accelerator()
    deepspeed.init_distributed(dist_backend="gloo" if accelerator.device_name() == "cpu" else None)
    rank, world_size = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    device = accelerator.current_device_name()
    accelerator.manual_seed(args.seed)

    initial = build_model(args.seed).state_dict()  # the same starting weights for every engine
    with deepspeed.zero.Init(config_dict_or_path=args.deepspeed_config):
        model = build_model(args.seed)
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        if rank == 0:
            with torch.no_grad():
                for name, param in model.named_parameters():
                    param.copy_(initial[name])

    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    accumulation = engine.gradient_accumulation_steps()
    data = torch.randint(0, 96, (EPOCHS + 1, MICRO_BATCHES_PER_EPOCH, world_size, 2, 12),
                         generator=torch.Generator().manual_seed(args.seed))
    losses: list[float] = []

    def run_epoch(epoch: int) -> None:
        for micro in range(MICRO_BATCHES_PER_EPOCH):
            last = micro == MICRO_BATCHES_PER_EPOCH - 1
            engine.set_gradient_accumulation_boundary((micro + 1) % accumulation == 0 or last)
            ids = data[epoch, micro, rank].to(device)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())

    for epoch in range(EPOCHS):
        run_epoch(epoch)
    engine.save_checkpoint(args.save_dir, client_state={"epoch": EPOCHS, "samples": len(losses) * 2})
    deepspeed.comm.barrier()
    _, client_state = engine.load_checkpoint(args.save_dir)
    run_epoch(EPOCHS)  # one more epoch from the loaded state
    engine.save_checkpoint(args.save_dir, tag="final")

    mean_loss = torch.tensor([sum(losses) / len(losses)])
    deepspeed.comm.all_reduce(mean_loss)
    saved = engine.save_16bit_model(f"{args.save_dir}/16bit")
    deepspeed.comm.barrier()

    result: dict[str, Any] = {
        "losses": losses, "global_steps": engine.global_steps, "saved_16bit": saved,
        "client_state": {key: client_state[key] for key in ("epoch", "samples")},
        "comm": (rank, world_size, deepspeed.comm.get_local_rank(), mean_loss.item() / world_size),
    }
    if rank == 0:
        zero_to_fp32 = importlib.import_module(f"{deepspeed.__name__}.utils.zero_to_fp32")
        result["fp32"] = zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(args.save_dir, tag="final")
        result["16bit"] = torch.load(Path(args.save_dir) / "16bit" / "pytorch_model.bin", weights_only=True)
        loaded = zero_to_fp32.load_state_dict_from_zero_checkpoint(build_model(0), args.save_dir, tag="final")
        result["loaded"] = {name: value.detach().clone() for name, value in loaded.state_dict().items()}
    engine.destroy()
    return result


if __name__ == "__main__":
    import deepspeed as _deepspeed

    main(_deepspeed, sys.argv[1:])
