"""Offloaded copies are issued ahead and waited for only by their consumer (docs/offload.md, "Copies").

A recording accelerator (a CpuAccelerator whose copy stream runs a copy only when something
waits for it, or for a later copy: a consumer that forgot to wait reads stale values) and a
recording offload device (zero-offload's `cpu` device, labelling each copy) are registered on
the plugin manager, as third parties would. A stage-3 run with `offload_param` and
`offload_optimizer` on them must issue every copy before anything waits for it, issue unit
k+1's copy (its prefetch) before unit k's forward has run, block the host nowhere inside a
forward or a backward, and train exactly as the same run on the plain `cpu` device and
accelerator, whose copies are complete at once.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pytest
import torch
from zero_plugins import Category, hookimpl

import zero_core
from zero_core.accelerator import COMPLETED, CopyStream, Transfer, get_accelerator, reset_accelerator
from zero_core.accelerator.cpu import CpuAccelerator
from zero_core.memory import Placement
from zero_core.offload import OffloadDevice, OffloadPlan, SwapSettings, SwapSlot, SwapSpace, SwapTransfer
from zero_core.sharding import SwapPool
from zero_core.stage3 import unit_of
from zero_offload._cpu_device import CpuOffloadDevice

pytestmark = pytest.mark.usefixtures("solo_process_group")

Event = tuple[str, Any]  # ("issue" | "wait" | "after" | "synchronize", LazyTransfer), or a marker and its subject
LOG: list[Event] = []
HOST_BLOCKS = {"synchronize", "synchronize-stream", "synchronize-accelerator"}


class LazyTransfer(Transfer):
    def __init__(self, stream: LazyCopies, copy: Callable[[], object], keep: Sequence[torch.Tensor]) -> None:
        self._stream = stream
        self._copy: Callable[[], object] | None = copy
        self.keep = list(keep)
        self.label: tuple[str, int] = ("unlabelled", 0)  # (direction, the host end's address), set by the device

    @property
    def done(self) -> bool:
        return self._copy is None

    def run(self) -> None:
        assert self._copy is not None
        self._copy()
        self._copy, self.keep = None, []

    def wait(self) -> None:
        LOG.append(("wait", self))
        self._stream.run_through(self)

    def synchronize(self) -> None:
        LOG.append(("synchronize", self))
        self._stream.run_through(self)

    def after(self) -> AbstractContextManager[None]:
        LOG.append(("after", self))
        self._stream.run_through(self)  # what is issued inside follows the copy
        return nullcontext()


class LazyCopies(CopyStream):
    """Copies run in issue order, as late as they may: when something waits for them or a later one."""

    def __init__(self) -> None:
        self.pending: deque[LazyTransfer] = deque()

    def issue(self, copy: Callable[[], object], keep: Sequence[torch.Tensor]) -> Transfer:
        transfer = LazyTransfer(self, copy, keep)
        self.pending.append(transfer)
        LOG.append(("issue", transfer))
        return transfer

    def run_through(self, transfer: LazyTransfer) -> None:
        while not transfer.done:
            self.pending.popleft().run()

    def synchronize(self) -> None:
        LOG.append(("synchronize-stream", self))
        while self.pending:
            self.pending.popleft().run()


class RecordingAccelerator(CpuAccelerator):
    name = "recording-cpu"

    def copy_stream(self) -> LazyCopies:
        return LazyCopies()

    def synchronize(self, device_index: int | None = None) -> None:
        LOG.append(("synchronize-accelerator", None))


class RecordingDevice(CpuOffloadDevice):
    def to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> Transfer:
        LOG.append(("to_host-add" if accumulate else "to_host-copy", None))
        return _labelled(super().to_host(host, source, accumulate=accumulate), "to_host", host)

    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> Transfer:
        return _labelled(super().to_device(target, host), "to_device", host)


def _labelled(transfer: Transfer, direction: str, host: torch.Tensor) -> Transfer:
    assert isinstance(transfer, LazyTransfer)
    transfer.label = (direction, host.data_ptr())
    return transfer


class RecordingPlugin:
    @hookimpl
    def zero_register_accelerators(self, register: Any) -> None:
        register("recording-cpu", RecordingAccelerator)

    @hookimpl
    def zero_register_offload_devices(self, register: Any) -> None:
        register("recording", RecordingDevice)


@pytest.fixture
def recording(plugin_manager, monkeypatch) -> Iterator[None]:  # type: ignore[no-untyped-def]
    plugin_manager.register(RecordingPlugin(), name="recording-plugin")
    monkeypatch.setenv("ZERO_CPU_OPTIMIZER_KERNEL", "torch")  # both runs step alike, with nothing to build
    reset_accelerator()
    yield
    reset_accelerator()


LAYERS = 4
STEPS = 3


def _train(monkeypatch: pytest.MonkeyPatch, accelerator: str, device: str) -> dict[str, Any]:
    """STEPS steps of stage 3 with both offloads; the losses, the final weights and what the units' host ends are."""
    monkeypatch.setenv("DS_ACCELERATOR", accelerator)
    reset_accelerator()
    LOG.clear()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(LAYERS)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.Tanh())])
    model.register_forward_pre_hook(lambda *_: LOG.append(("forward-begin", None)))
    model.register_forward_hook(lambda *_: LOG.append(("forward-end", None)))
    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda *_, k=index: LOG.append(("forward-done", k)))
    unit_numel = 16 * 16 + 16
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                    "stage3_prefetch_bucket_size": unit_numel,  # one unit ahead: k+1 at k's use
                                    "reduce_bucket_size": 2 * unit_numel,
                                    "offload_param": {"device": device}, "offload_optimizer": {"device": device}}}
    engine, _, _, _ = zero_core.initialize(model=model, config=config)
    assert get_accelerator().name == accelerator
    engine.optimizer.optimizer.register_step_pre_hook(lambda *_: LOG.append(("optimizer-step", None)))
    hosts = {}
    for index, layer in enumerate(layers):
        unit = unit_of(layer.weight)
        assert unit is not None
        hosts[unit.partition.tensor.data_ptr()] = index
    data = torch.randn(STEPS, 4, 16, generator=torch.Generator().manual_seed(1))
    losses = []
    for batch in data:
        loss = engine(batch).pow(2).mean()
        LOG.append(("backward-begin", None))
        engine.backward(loss)
        LOG.append(("backward-end", None))
        engine.step()
        losses.append(loss.item())
    state = {name: value.clone() for name, value in engine.module_state_dict().items()}
    assert engine.coordinator is not None
    prefetched = engine.coordinator.prefetched
    engine.destroy()
    return {"losses": losses, "state": state, "hosts": hosts, "prefetched": prefetched, "log": list(LOG)}


@pytest.fixture
def runs(recording, monkeypatch) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    return {"plain": _train(monkeypatch, "cpu", "cpu"), "recorded": _train(monkeypatch, "recording-cpu", "recording")}


def _spans(log: list[Event], begin: str, end: str) -> list[list[Event]]:
    starts = [i for i, (kind, _) in enumerate(log) if kind == begin]
    ends = [i for i, (kind, _) in enumerate(log) if kind == end]
    assert len(starts) == len(ends) == STEPS
    return [log[start : stop + 1] for start, stop in zip(starts, ends)]


def test_training_is_unchanged_when_copies_complete_late(runs) -> None:  # type: ignore[no-untyped-def]
    plain, recorded = runs["plain"], runs["recorded"]
    assert recorded["losses"] == plain["losses"]
    for name, value in plain["state"].items():
        assert torch.equal(recorded["state"][name], value), name


def test_every_copy_is_issued_before_it_is_waited_for(runs) -> None:  # type: ignore[no-untyped-def]
    log = runs["recorded"]["log"]
    issued: dict[int, int] = {}
    for position, (kind, subject) in enumerate(log):
        if kind == "issue":
            issued[id(subject)] = position
        elif kind in ("wait", "after", "synchronize"):
            assert id(subject) in issued, f"{kind} of {subject.label} before it was issued"
    labels = {subject.label[0] for kind, subject in log if kind == "issue"}
    assert labels == {"to_device", "to_host"}, "parameters came in and gradients went out through the device"


def test_a_gather_waits_where_its_parameters_are_used(runs) -> None:  # type: ignore[no-untyped-def]
    """Each gathered partition's copy is followed by its all-gather (`after`) and waited for by its unit."""
    log = runs["recorded"]["log"]
    gathers = [subject for kind, subject in log if kind == "issue" and subject.label[0] == "to_device"]
    assert gathers
    for transfer in gathers:
        kinds = [kind for kind, subject in log if subject is transfer]
        assert kinds[:2] == ["issue", "after"] and "wait" in kinds, (transfer.label, kinds)


def test_the_next_units_copy_is_issued_before_this_units_forward_runs(runs) -> None:  # type: ignore[no-untyped-def]
    recorded = runs["recorded"]
    assert recorded["prefetched"] > 0
    hosts = recorded["hosts"]
    for forward in _spans(recorded["log"], "forward-begin", "forward-end")[1:]:  # the first pass records the trace
        issued = {hosts[subject.label[1]]: position for position, (kind, subject) in enumerate(forward)
                  if kind == "issue" and subject.label[0] == "to_device"}
        ran = {subject: position for position, (kind, subject) in enumerate(forward) if kind == "forward-done"}
        assert sorted(issued) == sorted(ran) == list(range(LAYERS))
        for k in range(LAYERS - 1):
            assert issued[k + 1] < ran[k], f"unit {k + 1}'s copy was issued after unit {k}'s forward ran"


def test_no_host_block_inside_forward_or_backward(runs) -> None:  # type: ignore[no-untyped-def]
    log = runs["recorded"]["log"]
    for begin, end in (("forward-begin", "forward-end"), ("backward-begin", "backward-end")):
        for span in _spans(log, begin, end):
            blocks = [kind for kind, _ in span if kind in HOST_BLOCKS]
            assert not blocks, f"{begin[:-6]} blocked the host: {blocks}"


def test_the_host_waits_for_the_gradients_before_the_step_reads_them(runs) -> None:  # type: ignore[no-untyped-def]
    """The device's wait (`wait`, in backward) is not enough for the CPU step: the host must block on them."""
    log = runs["recorded"]["log"]
    pending: dict[int, LazyTransfer] = {}  # write-backs issued, the host not yet blocked on them
    steps = 0
    for kind, subject in log:
        if kind == "issue" and subject.label[0] == "to_host":
            pending[id(subject)] = subject
        elif kind == "synchronize":
            pending.pop(id(subject), None)
        elif kind == "synchronize-stream":
            pending = {key: transfer for key, transfer in pending.items() if transfer._stream is not subject}
        elif kind == "optimizer-step":
            steps += 1
            assert not pending, f"the step read gradients still in flight: {[t.label for t in pending.values()]}"
    assert steps >= STEPS


def test_one_micro_batch_copies_its_gradients_in_without_adding(runs) -> None:  # type: ignore[no-untyped-def]
    """The step zeroes the host gradient partitions; the next backward's first write-back into one copies (2 bytes
    per element across PCIe from a 16-bit bucket) rather than adds (a copy in, an add and a copy out)."""
    for span in _spans(runs["recorded"]["log"], "backward-begin", "backward-end"):
        kinds = [kind for kind, _ in span if kind.startswith("to_host")]
        assert kinds and set(kinds) == {"to_host-copy"}, kinds


def test_a_write_back_holds_the_reduce_buffer_it_reads(recording) -> None:  # type: ignore[no-untyped-def]
    """The classic bug: the reducer drops its buffer once the copy is issued, so the transfer must keep it."""
    stream = LazyCopies()
    device = RecordingDevice.__new__(RecordingDevice)
    device._copies = stream
    host = torch.zeros(4)
    source = torch.arange(4.0)
    transfer = device.to_host(host, source, accumulate=True)
    assert isinstance(transfer, LazyTransfer) and any(kept is source for kept in transfer.keep)
    del source
    transfer.wait()
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0] and transfer.keep == []


class NoneReturningDevice(OffloadDevice):
    """A device written before copies had handles: to_host and to_device return None."""

    placement = Placement.HOST

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "host memory"

    def check_capacity(self, plan: OffloadPlan) -> None:
        pass

    def allocate(self, numel: int, dtype: torch.dtype, category: str, *, pin: bool) -> torch.Tensor:
        return torch.zeros(numel, dtype=dtype)

    def to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> None:
        host.add_(source) if accumulate else host.copy_(source)

    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> None:
        target.copy_(host)

    def synchronize(self) -> None:
        pass

    def optimizer_class(self, name: str) -> type[torch.optim.Optimizer] | None:
        return None


def test_a_device_returning_none_gives_completed_transfers() -> None:
    device = NoneReturningDevice.__new__(NoneReturningDevice)
    host, target = torch.zeros(2), torch.zeros(2)
    assert device.transfer_to_host(host, torch.ones(2), accumulate=True) is COMPLETED
    assert device.transfer_to_device(target, host) is COMPLETED
    assert target.tolist() == [1.0, 1.0]


class MemorySpace(SwapSpace):
    """Only what a pool asks of its space when it is made: staging memory."""

    slot_alignment = 4

    def staging_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(numel, dtype=dtype)

    def reserve(self, name: str, numel: int, dtype: torch.dtype, category: Category) -> SwapSlot:
        raise NotImplementedError

    def write(self, slot: SwapSlot, source: torch.Tensor) -> SwapTransfer:
        raise NotImplementedError

    def read(self, slot: SwapSlot, target: torch.Tensor) -> SwapTransfer:
        raise NotImplementedError


def test_a_pool_buffer_is_free_again_only_once_the_device_copy_out_of_it_completes() -> None:
    """A swapped partition's buffer goes back to the pool as its copy to the device starts (SwappedShard): the
    pool must not hand it to the next read before that copy has read it, and waits for it only when out of buffers."""
    pool = SwapPool(MemorySpace(), SwapSettings(buffer_count=2, buffer_numel=4, dtype=torch.float32))
    stream = LazyCopies()
    first, second = pool.acquire(2, lambda: False)
    copies = [stream.issue(lambda: None, keep=(buffer,)) for buffer in (first, second)]
    for buffer, copy in zip((first, second), copies):
        pool.release([buffer], after=copy)
    assert pool.free == 0
    LOG.clear()
    copies[0].wait()  # the device has read the first buffer
    assert pool.free == 1 and not LOG[1:], "reclaiming a completed copy's buffer never blocks"
    (again,) = pool.acquire(1, lambda: False)
    assert again is first
    (last,) = pool.acquire(1, lambda: False)  # out of buffers: the host waits for the second copy
    assert last is second and [kind for kind, subject in LOG if subject is copies[1]] == ["synchronize"]
