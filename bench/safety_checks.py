"""What the checks of issue #21 cost, beside what they guard, on Pythia-6.9B's shape (built on the meta device).

    .venv/bin/python bench/safety_checks.py

- per backward: the frozen/unfrozen check over every parameter (engine/_inputs.py TrainableSet), against
  the time of a bare Python loop over the same parameters;
- per save: the client_state/training-state walk (checkpoint/_storable.py) over a training state of
  Pythia's 388 parameter tensors' optimizer step counts and a typical client_state;
- per open: reading DCP's `.metadata` of a 388-tensor checkpoint through the allowlisting unpickler
  (checkpoint/_trust.py), against the bare `pickle.load` DCP uses.
Each figure is the median of 20 runs.
"""
from __future__ import annotations

import io
import pickle
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from zero_core.checkpoint._storable import check_client_state, check_engine_state
from zero_core.checkpoint._trust import MetadataUnpickler
from zero_core.engine._inputs import TrainableSet


def _median_ms(work: Callable[[], object], runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    config = GPTNeoXConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, intermediate_size=16384,
                           vocab_size=50432, max_position_embeddings=2048)
    with torch.device("meta"):
        model = GPTNeoXForCausalLM(config)
    params = list(model.parameters())
    trainable = TrainableSet(model)
    check = _median_ms(trainable.check)
    bare = _median_ms(lambda: [p.requires_grad for p in params])
    print(f"frozen/unfrozen check per backward ({len(params)} parameters): {check:.3f} ms "
          f"({check / bare:.1f}x a bare loop reading requires_grad, {bare:.3f} ms)")

    state = {"counters": {"global_steps": 1000}, "optimizer_steps": [torch.tensor(1000.0)] * len(params),
             "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}],
             "loss_scaler": {"cur_scale": 1.0}, "lr_scheduler": {"last_epoch": 1000, "_last_lr": [1e-4]}}
    client = {"epoch": 3, "sampler": {"seed": 0, "position": 123456}, "best": torch.tensor(2.5)}
    walk = _median_ms(lambda: (check_client_state(client), check_engine_state(state)))
    print(f"client_state and training-state check per save: {walk:.3f} ms")

    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({f"model.{n}": torch.zeros(1) for n, _ in model.named_parameters()}, checkpoint_id=directory,
                 no_dist=True)
        data = (Path(directory) / ".metadata").read_bytes()
    restricted = _median_ms(lambda: MetadataUnpickler(io.BytesIO(data), "bench").load())
    plain = _median_ms(lambda: pickle.load(io.BytesIO(data)))
    print(f"reading .metadata ({len(data) / 1024:.0f} KiB, {len(params)} tensors): allowlisted {restricted:.2f} ms, "
          f"bare pickle.load {plain:.2f} ms ({restricted / plain:.2f}x)")


if __name__ == "__main__":
    main()
