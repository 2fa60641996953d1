"""What the checkpoint manifest costs: save and load times with and without it, as ratios, in one run.

    .venv/bin/python bench/checkpoint_verify.py [--layers 3] [--width 2048] [--repeats 3]

One process (stage 2, AdamW, fp32): a model of `layers` Linear(width, width) takes a step and is saved
`repeats` times. A save always writes the manifest (at publish: every file re-read and hashed with
blake2b); its share is timed by hashing each saved tag again the same way (`write_manifest` on a copy
of the tag without its manifest), so "without" is the save minus that. The re-read is the most that
hashing while DCP writes could save: the same bytes hashed from memory are timed beside it. Loads are
timed on the same tag with its manifest (verified: every file hashed first) and without it (unverified).
The medians are printed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def _engine(layers: int, width: int) -> Any:
    import zero_core

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 2}}
    engine, _, _, _ = zero_core.initialize(model=model, config=config)
    engine.backward(engine(torch.randn(2, width)).pow(2).mean())
    engine.step()
    return engine


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from zero_core.checkpoint._manifest import MANIFEST, write_manifest

    engine = _engine(args.layers, args.width)
    root = Path(tempfile.mkdtemp(prefix="zero-bench-verify-"))
    saves, manifests, in_memory, verified, unverified = [], [], [], [], []
    try:
        for k in range(args.repeats):
            saves.append(_timed(lambda: engine.save_checkpoint(root / "saves", tag=f"t{k}")))
            tag = root / "saves" / f"t{k}"
            copy = root / f"copy{k}"
            shutil.copytree(tag, copy)
            (copy / MANIFEST).unlink()
            for path in copy.iterdir():  # warm, as the save's own files are when it hashes them
                path.read_bytes()
            manifests.append(_timed(lambda: write_manifest(copy)))
            contents = [path.read_bytes() for path in tag.iterdir() if path.name != MANIFEST]
            in_memory.append(_timed(lambda: [hashlib.blake2b(data).hexdigest() for data in contents]))
            unverified_dir = root / f"unverified{k}"
            shutil.copytree(root / "saves", unverified_dir, ignore=shutil.ignore_patterns("latest"))
            for name in os.listdir(unverified_dir):
                (unverified_dir / name / MANIFEST).unlink()
            verified.append(_timed(lambda: engine.load_checkpoint(root / "saves", tag=f"t{k}")))
            unverified.append(_timed(lambda: engine.load_checkpoint(unverified_dir, tag=f"t{k}")))
        size = sum(path.stat().st_size for path in (root / "saves" / "t0").iterdir())
    finally:
        engine.destroy()
        shutil.rmtree(root)
    save, manifest = statistics.median(saves), statistics.median(manifests)
    load, bare = statistics.median(verified), statistics.median(unverified)
    print(f"checkpoint: {size / 2**20:.1f} MiB in one tag ({args.layers} x Linear({args.width}, {args.width}), "
          f"AdamW, fp32; medians of {args.repeats})")
    print(f"save: {save:.3f} s with the manifest, {save - manifest:.3f} s without: ratio {save / (save - manifest):.3f} "
          f"(manifest {manifest:.3f} s: {size / 2**20 / manifest:.0f} MiB/s re-read and hashed; the same bytes "
          f"hashed from memory {statistics.median(in_memory):.3f} s)")
    print(f"load: {load:.3f} s verified, {bare:.3f} s unverified: ratio {load / bare:.3f}")


if __name__ == "__main__":
    sys.exit(main())
