"""Memory of loading and exporting checkpoints, against the model's size, in one run.

    .venv/bin/python bench/checkpoint_memory.py

A GPT-NeoX (vocabulary 8192, hidden 256, 8 layers: 10.5M params, 40 MiB in fp32) is saved
with `save_pretrained` (safetensors) to a temporary directory. Then:
- **from_pretrained under Init**, 2 gloo ranks: `with zero_core.Init(config): from_pretrained(dir)`
  (stage 3, every parameter partitioned), beside eager `from_pretrained` in one process. Two
  measures per rank: the peak of tensor bytes (a StorageTracker, which also counts each loaded
  tensor as it is assigned, so pages of the memory-mapped file are included), and the rise of
  the process's anonymous memory (RssAnon, sampled every 0.5 ms), which the tracker cannot see
  in transformers' reader threads. A warm-up load comes first, so imports are not counted.
- **save, then export**: the same model in a stage-3 engine on 2 ranks takes one step and
  saves; `zero checkpoint export` (`export_checkpoint`, max shard 8 MiB, fp32) then runs in
  this process under a StorageTracker, and the peak is printed against the model and shard
  sizes; the save's and the export's times too.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test helpers build the model

MiB = 2**20
NEOX = {"vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 8,
        "intermediate_size": 1024, "max_position_embeddings": 128}
INIT = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
ENGINE = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3}}


def _anonymous_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class AnonymousPeak:
    """The highest RssAnon above its value at entry, sampled on a thread."""

    def __enter__(self) -> AnonymousPeak:
        self.base = self.peak = _anonymous_bytes()
        self._stop = False
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, _anonymous_bytes())
            time.sleep(0.0005)

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join()

    @property
    def rise(self) -> int:
        return self.peak - self.base


def _load(rank: int, world_size: int, path: str, warm: str, under_init: bool) -> dict[str, Any]:
    import zero_core
    from transformers import AutoModelForCausalLM

    with zero_core.Init(config=INIT):
        AutoModelForCausalLM.from_pretrained(warm)
    with zero_core.StorageTracker() as tracker:
        def count(module: torch.nn.Module, name: str, param: Any) -> None:
            if isinstance(param, torch.Tensor) and param.device.type != "meta":
                tracker.track(param)

        hook = torch.nn.modules.module.register_module_parameter_registration_hook(count)
        start = time.perf_counter()
        with AnonymousPeak() as anonymous:
            if under_init:
                with zero_core.Init(config=INIT):
                    model = AutoModelForCausalLM.from_pretrained(path)
            else:
                model = AutoModelForCausalLM.from_pretrained(path)
        seconds = time.perf_counter() - start
        hook.remove()
    numel = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    largest = max(sum(getattr(p, "ds_numel", p.numel()) for p in m.parameters(recurse=False)) for m in model.modules())
    return {"peak": tracker.peak_bytes("cpu"), "after": tracker.current_bytes("cpu"), "anonymous": anonymous.rise,
            "whole": 4 * numel, "largest": 4 * largest, "seconds": seconds}


def _save(rank: int, world_size: int, path: str, save_dir: str) -> float:
    import zero_core
    from transformers import AutoModelForCausalLM

    engine, _, _, _ = zero_core.initialize(model=AutoModelForCausalLM.from_pretrained(path), config=ENGINE)
    ids = torch.randint(0, NEOX["vocab_size"], (1, 64), generator=torch.Generator().manual_seed(rank))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    start = time.perf_counter()
    engine.save_checkpoint(save_dir)
    seconds = time.perf_counter() - start
    engine.destroy()
    return seconds


def main() -> None:
    from hf_models import gpt_neox
    from multirank import run_ranks
    from zero_core import StorageTracker
    from zero_core.checkpoint import export_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        warm, path = os.path.join(tmp, "warm"), os.path.join(tmp, "model")
        gpt_neox(0, vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=16).save_pretrained(warm)
        gpt_neox(0, **NEOX).save_pretrained(path)
        print("from_pretrained, fp32 safetensors (MiB):")
        print(f"{'':<22}{'whole':>8}{'largest module':>16}{'tracker peak':>14}{'RssAnon rise':>14}{'seconds':>9}")
        for label, ranks, under_init in (("Init, 2 ranks", 2, True), ("eager, 1 process", 1, False)):
            for rank, r in enumerate(run_ranks(_load, ranks, path, warm, under_init, timeout=300)):
                print(f"{label + f' rank {rank}':<22}{r['whole'] / MiB:>8.2f}{r['largest'] / MiB:>16.2f}"
                      f"{r['peak'] / MiB:>14.2f}{r['anonymous'] / MiB:>14.2f}{r['seconds']:>9.2f}")
        save_dir, out = os.path.join(tmp, "checkpoints"), os.path.join(tmp, "hf")
        save_seconds = max(run_ranks(_save, 2, path, save_dir, timeout=300))
        start = time.perf_counter()
        with StorageTracker() as tracker:
            result = export_checkpoint(save_dir, out, max_shard_size=8 * MiB)
        export_seconds = time.perf_counter() - start
        whole = sum(p.stat().st_size for p in Path(out).glob("*.safetensors"))
        print(f"\nsave (2 ranks, stage 3, with AdamW state): {save_seconds:.2f} s")
        print(f"export: {result['tensors']} tensors in {len(result['files'])} shard(s) of at most 8 MiB, "
              f"{whole / MiB:.2f} MiB written, {export_seconds:.2f} s; peak tensor memory "
              f"{tracker.peak_bytes('cpu') / MiB:.2f} MiB ({tracker.peak_bytes('cpu') / whole:.0%} of the model)")


if __name__ == "__main__":
    main()
