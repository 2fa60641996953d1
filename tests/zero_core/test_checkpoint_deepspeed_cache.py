"""load_checkpoint's conversion of a DeepSpeed checkpoint is keyed by the files' content, and lives in one cache
when the checkpoint's directory is read-only.

The DeepSpeed checkpoints are written here in DeepSpeed 0.19's layout (fp32, stage 2, 1 rank: a model states
file and one optimizer file; tests/integration/test_resume_from_deepspeed.py checks the layouts against
DeepSpeed itself).

- A file rewritten with other values but the same size and an older mtime (what `cp -p` or `rsync -a` of an
  older copy does) is converted again: the old conversion is neither reused nor kept.
- A read-only DeepSpeed directory (as `nobody` when the tests run as root, whom modes do not stop) is
  converted into `$ZERO_DEEPSPEED_CACHE/<content key>/<tag>`; a second load reuses it, the cache keeps
  the CACHE_KEEP most recently used conversions, and no temporary directory is left behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

TAG = "global_step1"


def _deepspeed_checkpoint(save_dir: Path, weights: list[float]) -> Path:
    """DeepSpeed's save_dir with one tag: a parameter `w` whose fp32 master is `weights`."""
    tag = save_dir / TAG
    tag.mkdir(parents=True)
    w = torch.tensor(weights)
    torch.save({"module": {"w": w}, "buffer_names": [], "param_shapes": [OrderedDict(w=torch.Size([len(weights)]))],
                "frozen_param_shapes": OrderedDict(), "shared_params": {}, "global_steps": 1, "ds_config": {}},
               tag / "mp_rank_00_model_states.pt")
    state = {"step": torch.tensor(1.0), "exp_avg": w * 2, "exp_avg_sq": w * 3}
    torch.save({"optimizer_state_dict": {
        "base_optimizer_state": {"state": {0: state}, "param_groups": [{"lr": 0.5, "params": [0]}]},
        "single_partition_of_fp32_groups": [w], "zero_stage": 2, "group_paddings": [0], "partition_count": [1],
    }}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (save_dir / "latest").write_text(TAG)
    return save_dir


def _master(save_dir: Path) -> list[float]:
    from zero_core.checkpoint import SavedCheckpoint

    return SavedCheckpoint.open(save_dir, TAG).read("master.w").tolist()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_changed_file_with_an_old_mtime_is_converted_again(tmp_path: Path) -> None:
    from zero_core.checkpoint._deepspeed_resume import CONVERTED, deepspeed_as_zero

    ds = _deepspeed_checkpoint(tmp_path / "ds", [1.0, 2.0, 3.0])
    first, tag = deepspeed_as_zero(ds, None, trust_checkpoint=False)
    assert tag == TAG and first.parent == ds / CONVERTED and _master(first) == [1.0, 2.0, 3.0]
    # Another run's checkpoint copied over it with its (older) times kept: same sizes, other values.
    _deepspeed_checkpoint(tmp_path / "other", [1.0, 2.0, 3.5])
    for source in (tmp_path / "other" / TAG).iterdir():
        target = ds / TAG / source.name
        assert source.stat().st_size == target.stat().st_size
        target.write_bytes(source.read_bytes())
        os.utime(target, (1_000_000, 1_000_000))
    second, _ = deepspeed_as_zero(ds, None, trust_checkpoint=False)
    assert second != first and _master(second) == [1.0, 2.0, 3.5]
    assert sorted(path.name for path in (ds / CONVERTED).iterdir()) == [second.name], "the stale conversion is gone"
    assert deepspeed_as_zero(ds, None, trust_checkpoint=False)[0] == second, "the same files: reused"


# A fresh interpreter (as `nobody` under root) loads each DeepSpeed save_dir named on its command line twice.
READ_ONLY_CHILD = r"""
import json, os, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from zero_core.checkpoint._deepspeed_resume import deepspeed_as_zero  # before setuid: nobody may not read the stdlib
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
print(json.dumps([[str(deepspeed_as_zero(Path(d), None, False)[0]) for _ in range(2)] for d in sys.argv[1:]]))
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every user can read (tmp_path is its owner's only), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="zero-ds-cache-test-"))
    root.chmod(0o755)
    yield root
    for path in root.rglob("*"):  # restore write access first: the checkpoints below were made read-only
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    root.chmod(0o755)
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


def test_a_read_only_checkpoint_is_converted_into_one_pruned_cache(shared_tmp: Path) -> None:
    from zero_core.checkpoint._deepspeed_resume import CACHE_KEEP, CONVERTED

    sources = [_deepspeed_checkpoint(shared_tmp / f"ds{k}", [1.0, 2.0, float(k)]) for k in range(CACHE_KEEP + 1)]
    for source in sources:
        source.chmod(0o555)
        (source / TAG).chmod(0o555)
    cache, scratch = shared_tmp / "cache", shared_tmp / "tmp"
    for folder in (cache, scratch):
        folder.mkdir()
        if os.geteuid() == 0:
            os.chown(folder, 65534, 65534)
    environment = {**os.environ, "ZERO_DEEPSPEED_CACHE": str(cache), "TMPDIR": str(scratch), "HOME": str(scratch)}
    result = subprocess.run([sys.executable, "-c", READ_ONLY_CHILD, *map(str, sources)], capture_output=True,
                            text=True, timeout=240, env=environment)
    assert result.returncode == 0, result.stderr
    loads = json.loads(result.stdout.splitlines()[-1])
    for (first, again), source in zip(loads, sources):
        assert first == again and Path(first).parent == cache, (first, again)
        assert not (source / CONVERTED).exists()
    kept = sorted(path.name for path in cache.iterdir())
    assert kept == sorted(Path(first).name for first, _ in loads[1:]), "the least recently used one was removed"
    assert [_master(cache / name) for name in sorted(kept, key=lambda n: [Path(f).name for f, _ in loads].index(n))] \
        == [[1.0, 2.0, float(k)] for k in range(1, CACHE_KEEP + 1)]
    assert not any(path.name.startswith("zero-from-deepspeed") for path in scratch.rglob("*"))
