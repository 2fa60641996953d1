"""Runs a program written for DeepSpeed's launcher under plain torchrun on the real DeepSpeed (the reference peer):
`python -m torch.distributed.run --nproc_per_node N on_deepspeed.py [--comm-first] program.py [args]`,
DS_ACCELERATOR=cpu.

What DeepSpeed's own launcher would add: `--local_rank=<n>` right after the program (DeepSpeed-Chat initializes
its process group only when given one). DeepSpeed's comm is told not to compile its shared-memory all-reduce
(inference only, about a minute on 2 cores). The program runs as its own __main__, and the process group it
leaves up is ended here. Then the rank leaves without finalizing the interpreter: even after that, a DeepSpeed
stage-3 rank aborted now and then during finalization (SIGABRT after its results were written, about one run in
a full test suite), as pytorch/pytorch#179291 describes for gloo work still referenced at exit. A program that
raised still fails.

`--comm-first`: DeepSpeed's comm starts the process group (gloo) before the program runs. A Trainer program with
`--use_cpu` needs it on DeepSpeed: accelerate would start the group, and DeepSpeed's zero.Init, reading its
config before its own comm is up, sees world size 1 and refuses the Trainer's train_batch_size.
"""
from __future__ import annotations

import importlib
import logging
import os
import runpy
import sys


COMM_FIRST = "--comm-first"


def main() -> None:
    deepspeed = importlib.import_module("deepspeed")
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    if sys.argv[1] == COMM_FIRST:
        del sys.argv[1]
        deepspeed.init_distributed(dist_backend="gloo")
    program = sys.argv[1]
    sys.argv[:2] = [program, f"--local_rank={os.environ['LOCAL_RANK']}"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))  # as `python program.py` would
    runpy.run_path(program, run_name="__main__")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
