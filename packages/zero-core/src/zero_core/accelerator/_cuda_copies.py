"""CUDA's copy stream: copies on a side stream, each transfer an event recorded after its copies.

The side stream first waits for the work issued so far on the current stream (the copy must see what
compute wrote), so the copies overlap the compute issued after them. A consumer on the device makes its
stream wait on the event (`Transfer.wait`); only the step's boundary blocks the host (`synchronize`).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch

from ._copies import CopyStream, Transfer


class CudaTransfer(Transfer):
    def __init__(self, stream: torch.cuda.Stream, event: torch.cuda.Event, keep: Sequence[torch.Tensor]) -> None:
        self._stream = stream
        self._event = event
        # The copies read and write these asynchronously: freeing either end before they finish is the classic
        # use-after-free (a reduce buffer reused by the next bucket, pinned memory returned to the system).
        self._device_ends = [tensor for tensor in keep if tensor.device.type != "cpu"]
        self._host_ends = [tensor for tensor in keep if tensor.device.type == "cpu"]
        self._done = False

    @property
    def done(self) -> bool:
        if not self._done and self._event.query():
            self._complete()
        return self._done

    def wait(self) -> None:
        torch.cuda.current_stream(self._stream.device).wait_event(self._event)
        # The caching allocator hands a freed block only to work on the stream that allocated it, the current one,
        # now ordered after the copies; host memory has no such order, so the host ends stay held until complete.
        self._device_ends = []

    def synchronize(self) -> None:
        self._event.synchronize()
        self._complete()

    def after(self) -> AbstractContextManager[None]:
        # On the side stream, its work (an NCCL collective waits for the stream it is issued on) follows the copies.
        return torch.cuda.stream(self._stream)

    def _complete(self) -> None:
        self._done = True
        self._device_ends = self._host_ends = []


class CudaCopyStream(CopyStream):
    def __init__(self, device: torch.device) -> None:
        self._stream = torch.cuda.Stream(device)
        self._in_flight: deque[CudaTransfer] = deque()  # in issue order, so complete in that order

    def issue(self, copy: Callable[[], object], keep: Sequence[torch.Tensor]) -> Transfer:
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            copy()
        event = torch.cuda.Event()
        event.record(self._stream)
        # Let go of what finished (never blocks), so that held ends do not pile up until the step.
        while self._in_flight and self._in_flight[0].done:
            self._in_flight.popleft()
        transfer = CudaTransfer(self._stream, event, keep)
        self._in_flight.append(transfer)
        return transfer

    def synchronize(self) -> None:
        self._stream.synchronize()
        for transfer in self._in_flight:
            transfer.synchronize()  # complete already: lets go of its ends
        self._in_flight.clear()
