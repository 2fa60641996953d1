"""The cross-rank check at `initialize`: its time for a large model, on 2 gloo ranks.

    .venv/bin/python bench/fingerprint.py

Each rank builds Pythia-6.9B's shape (GPTNeoXConfig: hidden 4096, 32 layers, vocabulary 50432) on the meta
device (no memory), loads a stage-3 ds_config, and times `zero_core.engine._preflight.check_ranks_agree`
(the fingerprint of every parameter's name, shape, dtype and requires_grad plus the effective config,
hashed, and one all-gather of the digest) five times; it prints the median and the fingerprint's size,
beside one 8-byte all-reduce on the same group for scale.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # multirank


def _measure(rank: int, world_size: int) -> dict[str, Any]:
    import json

    import torch
    import torch.distributed as dist
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from zero_plugins.ds_config import load_config
    from zero_core.engine._preflight import check_ranks_agree, fingerprint

    dist.init_process_group("gloo")
    config = GPTNeoXConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, intermediate_size=16384,
                           vocab_size=50432, max_position_embeddings=2048)
    with torch.device("meta"):
        model = GPTNeoXForCausalLM(config)
    ds = load_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                      "zero_optimization": {"stage": 3}}, world_size=world_size)
    times, reduces = [], []
    for _ in range(5):
        dist.barrier()
        start = time.perf_counter()
        check_ranks_agree(model, ds)
        times.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(torch.zeros(1, dtype=torch.float64))
        reduces.append(time.perf_counter() - start)
    params = sum(p.numel() for p in model.parameters())
    size = len(json.dumps(fingerprint(model, ds), sort_keys=True))
    return {"median": statistics.median(times), "all_reduce": statistics.median(reduces), "tensors":
            len(list(model.parameters())), "params": params, "fingerprint_bytes": size}


def main() -> int:
    from multirank import run_ranks

    result = run_ranks(_measure, 2, timeout=300)[0]
    print(f"Pythia-6.9B's shape ({result['params'] / 1e9:.2f}B parameters in {result['tensors']} tensors), "
          f"2 gloo ranks, stage 3 config")
    print(f"check_ranks_agree: median {result['median'] * 1e3:.1f} ms of 5 (fingerprint {result['fingerprint_bytes']:,}"
          f" bytes of JSON, hashed; one all-gather of the 64-byte digest)")
    print(f"one 8-byte all_reduce on the same group: median {result['all_reduce'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
