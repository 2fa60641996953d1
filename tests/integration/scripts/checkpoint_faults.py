"""One rank of tests/integration/test_checkpoint_faults.py's subprocess cases: `python checkpoint_faults.py MODE
SAVE_DIR [ARG]` with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Modes that report
print one JSON line on stdout.

- `exit-after-async`: a step, then `save_checkpoint(..., async_save=True)` as the script's last line (ARG: the
  model's number of layers, 2 by default).
- `load`: load `latest` into a fresh engine (ARG: layers); prints the tag and whether the weights equal the saved ones.
- `disk-full`: save `first`, then `second` into a save_dir too small for both (a tmpfs the test mounted);
  prints the second save's error and what a fresh engine loads.
- `size-limit`: save `first`; under RLIMIT_FSIZE (ARG bytes) save `second`, then `third` asynchronously with a
  step after it, then `fourth` asynchronously with destroy() after it and a new engine on the same model.
- `wait-then-save`: print `ready`, wait until ARG (a lock file) exists, then save; prints the error.
- `resave` / `reload`: re-save the tag `t` (each version's weights in `versions/`), or load it, until ARG seconds pass.
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
import zero_core

CONFIG: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
                          "zero_optimization": {"stage": 2}}
WIDTH = 256


def model(layers: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)])


def step(engine: Any) -> None:
    engine.backward(engine(torch.randn(2, WIDTH)).pow(2).mean())
    engine.step()


def weights(engine: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in engine.module_state_dict().items()}


def outcome(call: Any) -> str:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - reported to the test
        cause = error.__cause__
        return f"{type(error).__name__}: {error} [cause: {type(cause).__name__ if cause else None}]"
    return "no error"


def load(save_dir: str, layers: int = 2) -> dict[str, Any]:
    engine, _, _, _ = zero_core.initialize(model=model(layers), config=CONFIG)
    path, client_state = engine.load_checkpoint(save_dir)
    loaded = weights(engine)
    engine.destroy()
    saved = Path(save_dir) / f"{Path(path).name}.weights.pt"
    return {"tag": Path(path).name, "equal": saved.exists() and all(
        torch.equal(loaded[k], v) for k, v in torch.load(saved).items()), "client_state": client_state}


def save(engine: Any, save_dir: str, tag: str, **kwargs: Any) -> None:
    torch.save(weights(engine), Path(save_dir) / f"{tag}.weights.pt")
    engine.save_checkpoint(save_dir, tag=tag, **kwargs)


def main(mode: str, save_dir: str, arg: str = "") -> None:
    layers = 6 if mode == "disk-full" else int(arg) if mode in ("exit-after-async", "load") and arg else 2
    engine, _, _, _ = zero_core.initialize(model=model(layers), config=CONFIG)
    step(engine)
    report: dict[str, Any] = {}
    if mode == "exit-after-async":
        save(engine, save_dir, "last-line", async_save=True)
        return  # no wait_for_checkpoint(), no destroy()
    if mode == "load":
        engine.destroy()
        report = load(save_dir, layers)
    elif mode == "disk-full":
        save(engine, save_dir, "first")
        step(engine)
        report["second"] = outcome(lambda: engine.save_checkpoint(save_dir, tag="second"))
        report["left"] = sorted(p.name for p in Path(save_dir).iterdir())
        engine.destroy()
        report["load"] = load(save_dir, layers)
    elif mode == "size-limit":
        save(engine, save_dir, "first")
        step(engine)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(arg), hard))
        report["second"] = outcome(lambda: engine.save_checkpoint(save_dir, tag="second"))
        engine.save_checkpoint(save_dir, tag="third", async_save=True)
        report["step after third"] = outcome(lambda: step(engine))
        engine.save_checkpoint(save_dir, tag="fourth", async_save=True)
        report["destroy after fourth"] = outcome(engine.destroy)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        again, _, _, _ = zero_core.initialize(model=engine.module, config=CONFIG)
        report["new engine"] = outcome(lambda: step(again))
        again.destroy()
        report["left"] = sorted(p.name for p in Path(save_dir).iterdir())
        report["load"] = load(save_dir)
    elif mode == "wait-then-save":
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while not Path(arg).exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        report["save"] = outcome(lambda: engine.save_checkpoint(save_dir, tag="intruder"))
        engine.destroy()
    elif mode in ("resave", "reload"):
        report = (resave if mode == "resave" else reload)(engine, save_dir, time.monotonic() + float(arg))
    print(json.dumps(report))


def resave(engine: Any, save_dir: str, until: float) -> dict[str, Any]:
    versions = Path(save_dir) / "versions"
    versions.mkdir(exist_ok=True)
    version = 0
    while time.monotonic() < until:
        version += 1
        torch.save(weights(engine), versions / f"{version}.pt")
        engine.save_checkpoint(save_dir, tag="t", client_state={"version": version})
        step(engine)
    engine.destroy()
    return {"saves": version}


def reload(engine: Any, save_dir: str, until: float) -> dict[str, Any]:
    counts: dict[str, Any] = {"loaded": 0, "mixed": 0, "replaced": 0, "other": []}
    while not (Path(save_dir) / "t").exists():  # the saver's first save
        time.sleep(0.01)
    while time.monotonic() < until:
        try:
            _, client_state = engine.load_checkpoint(save_dir, tag="t")
        except zero_core.CheckpointError as error:
            if "was replaced by another save" in str(error):
                counts["replaced"] += 1
            else:
                counts["other"].append(str(error)[:300])
            continue
        except BaseException as error:  # noqa: BLE001 - a raw error is what the test looks for
            counts["other"].append(f"{type(error).__name__}: {error}"[:300])
            continue
        saved = torch.load(Path(save_dir) / "versions" / f"{client_state['version']}.pt")
        now = weights(engine)
        counts["loaded"] += 1
        counts["mixed"] += any(not torch.equal(now[k], v) for k, v in saved.items())
    engine.destroy()
    return counts


if __name__ == "__main__":
    main(*sys.argv[1:])
