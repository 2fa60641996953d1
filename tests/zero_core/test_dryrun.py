"""zero_core.dryrun: the fake allocator's count, the dry-run accelerator, and the session around them.

The engine traced under a dry run is held to real runs in test_profile_dry_run.py; here, the pieces: what the
fake allocator counts (each new storage once, views free, released when it dies, CUDA's 512-byte blocks), the
seams' stand-in values, pinning modelled only for a CUDA target, torch's optimizers taking the target's kernels,
and the refusals.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.optim.optimizer as torch_optimizer
from zero_plugins import ZeroError

from zero_core.accelerator import get_accelerator
from zero_core.dryrun import CUDA_BLOCK_BYTES, block_bytes, dry_run
from zero_core.memory import counts_fake_tensors, is_fake, read_bool, read_float, read_int


def test_cuda_blocks_round_up_to_512_bytes_and_the_cpu_count_is_exact() -> None:
    assert CUDA_BLOCK_BYTES == 512
    assert [block_bytes(n, "lazy") for n in (0, 1, 512, 513, 4000)] == [0, 512, 512, 1024, 4096]
    assert [block_bytes(n, "cpu") for n in (0, 1, 513)] == [0, 1, 513]


def test_the_fake_allocator_counts_each_storage_once_until_it_dies() -> None:
    with dry_run(rank=3, world_size=8, device="cuda", total_memory=1 << 30) as run:
        assert dist.get_rank() == 3 and dist.get_world_size() == 8 and dist.get_backend() == "fake"
        accelerator = get_accelerator()
        assert accelerator is run.accelerator and accelerator.device().type == "lazy"
        weights = torch.empty(1000, device=accelerator.device())  # 4000 bytes: 4096 in blocks
        assert is_fake(weights) and accelerator.memory_allocated() == 4096
        view = weights[10:20].view(2, 5)  # a view allocates nothing
        assert accelerator.memory_allocated() == 4096
        doubled = weights * 2
        assert accelerator.max_memory_allocated() == 8192
        del doubled, view
        assert accelerator.memory_allocated() == 4096 and accelerator.max_memory_allocated() == 8192
        accelerator.reset_peak_memory_stats()
        assert accelerator.max_memory_allocated() == 4096
        ruler = accelerator.allocator_ruler()
        assert ruler.counts(weights.untyped_storage()) and "512-byte blocks" in ruler.name
        host = torch.empty(10)  # the host's storages are counted apart from the device's
        assert run.allocator.current_bytes("cpu") == 40 and not ruler.counts(host.untyped_storage())
    assert not dist.is_initialized() and not counts_fake_tensors()
    assert get_accelerator().name != "dry-run", "the accelerator chosen before is back"


def test_pinning_is_modelled_for_a_cuda_target_only() -> None:
    with dry_run(rank=0, world_size=2, device="cuda", total_memory=1 << 30) as run:
        pinned = run.accelerator.pin_memory(torch.empty(256), make_copy=False)
        assert run.accelerator.is_pinned(pinned) and run.accelerator.pinned_bytes() == 1024
        assert run.accelerator.unpin_memory(pinned) and run.accelerator.pinned_bytes() == 0
    with dry_run(rank=0, world_size=2, device="cpu", total_memory=1 << 30) as run:
        assert run.accelerator.device().type == "cpu"
        assert not run.accelerator.is_pinned(run.accelerator.pin_memory(torch.empty(4), make_copy=False))


def test_a_fake_tensor_reads_as_an_ordinary_steps_value() -> None:
    real = torch.tensor([2.5])
    assert read_float(real, if_fake=1.0) == 2.5 and read_int(torch.tensor([7]), if_fake=0) == 7
    assert read_bool(torch.tensor(True), if_fake=False)
    with dry_run(rank=0, world_size=2, device="cpu", total_memory=1 << 30):
        fake = torch.tensor([2.5])
        assert read_float(fake, if_fake=1.0) == 1.0 and read_int(fake, if_fake=0) == 0
        assert read_bool(torch.isnan(fake).any(), if_fake=False) is False


def _adamw_step_temporaries(device: str, sizes: list[int], **kwargs: bool) -> tuple[int, tuple[bool, bool]]:
    """The bytes torch's AdamW holds above its state in its second step over fake fp32 tensors of `sizes`
    elements, on a dry run's `device`, and torch's default (fused, foreach) for them."""
    with dry_run(rank=0, world_size=2, device=device, total_memory=1 << 30) as run:
        params = [torch.zeros(n, device=run.accelerator.device()) for n in sizes]
        for param in params:
            param.grad = torch.zeros_like(param)
        optimizer = torch.optim.AdamW(params, lr=1e-3, **kwargs)
        optimizer.step()  # the first step makes the state
        held = run.accelerator.memory_allocated()
        run.accelerator.reset_peak_memory_stats()
        optimizer.step()
        chosen = torch_optimizer._default_to_fused_or_foreach(params, False)
        return run.accelerator.max_memory_allocated() - held, chosen


def test_torchs_optimizers_take_the_kernels_of_the_target_device() -> None:
    sizes = [1000, 3000]
    types_before = list(torch_optimizer._foreach_supported_types)  # torch adds DTensor once it is imported
    # CUDA: torch's default for real CUDA tensors is foreach, whose sqrt(v) list holds one fp32 tensor per
    # param at once, each in the caching allocator's blocks.
    temporaries, chosen = _adamw_step_temporaries("cuda", sizes)
    assert chosen == (False, True)
    assert temporaries == sum(block_bytes(4 * n, "lazy") for n in sizes) == 16384
    # fused, asked for, makes none (and a CUDA target accepts it, as CUDA does)
    assert _adamw_step_temporaries("cuda", sizes, fused=True)[0] == 0
    # an explicit foreach=False stands: tensor by tensor, sqrt(v) and the quotient of one tensor beside the
    # previous tensor's quotient
    single = max(block_bytes(4 * previous, "lazy") + 2 * block_bytes(4 * n, "lazy")
                 for previous, n in zip([0, *sizes], sizes))
    assert _adamw_step_temporaries("cuda", sizes, foreach=False)[0] == single == 28672
    # CPU: torch's default for real CPU tensors is tensor by tensor, counted exactly
    temporaries, chosen = _adamw_step_temporaries("cpu", sizes)
    assert chosen == (False, False)
    assert temporaries == max(4 * previous + 8 * n for previous, n in zip([0, *sizes], sizes)) == 28000
    assert torch_optimizer._foreach_supported_types == types_before, "restored on exit"
    assert torch_optimizer._get_foreach_kernels_supported_devices() == \
        torch.utils._foreach_utils._get_foreach_kernels_supported_devices()


def test_a_dry_run_refuses_a_joined_group_a_bad_rank_and_an_unknown_device() -> None:
    with pytest.raises(ZeroError, match=r"a dry run's rank must be in 0\.\.3 \(got 4\)"):
        with dry_run(rank=4, world_size=4, device="cuda", total_memory=1 << 30):
            pass
    with dry_run(rank=0, world_size=2, device="cpu", total_memory=1 << 30):
        with pytest.raises(ZeroError, match="has already joined one; run the dry run in a process of its own"):
            with dry_run(rank=0, world_size=2, device="cpu", total_memory=1 << 30):
                pass
    with pytest.raises(ValueError, match=r"a dry run targets one of cuda, cpu \(got 'tpu'\)"):
        with dry_run(rank=0, world_size=2, device="tpu", total_memory=1 << 30):
            pass
    assert not dist.is_initialized()
