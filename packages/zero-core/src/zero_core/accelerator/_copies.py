"""Copies between host and device in flight: the handle a copy returns, and the stream that issues them.

An offload device issues its copies on a `CopyStream` its accelerator makes (`Accelerator.copy_stream()`)
and hands back the `Transfer` it returns. Only the consumer of a copy waits for it, where it reads what the
copy carries: `wait()` for a consumer on the device (on CUDA the current stream waits on the copy's event;
the host goes on), `synchronize()` for a consumer on the host. The base stream, which accelerators without
streams use (the CPU's, a dry run's), copies at once and returns `COMPLETED`; CUDA's is _cuda_copies.py.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch


class Transfer(ABC):
    """Copies issued together, maybe still in flight. Until they are complete the transfer holds the tensors
    they read and write, so nothing frees either end under them."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """Whether the copies are complete (never blocks)."""

    @abstractmethod
    def wait(self) -> None:
        """Order work issued on the current stream from now on after the copies (a consumer on the device).
        The host does not block; the device tensors the copies touched may be freed once this returns."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until the copies are complete (a consumer on the host: the CPU step, a host buffer
        about to be refilled). Not for the per-unit or per-bucket path: there the device waits (`wait`)."""

    @abstractmethod
    def after(self) -> AbstractContextManager[None]:
        """Work issued inside (a collective over the copy's target) runs after the copies, without making the
        current stream wait for them: compute issued next overlaps the copies and that work."""


class _Completed(Transfer):
    @property
    def done(self) -> bool:
        return True

    def wait(self) -> None:
        """Complete: nothing to wait for."""

    def synchronize(self) -> None:
        """Complete: nothing to wait for."""

    def after(self) -> AbstractContextManager[None]:
        return nullcontext()


#: a transfer that was complete when the call that made it returned
COMPLETED: Transfer = _Completed()


class CopyStream:
    """Where one offload device issues its copies between host and device. This base copies when asked and
    returns `COMPLETED`: the copies of an accelerator whose work is done when the call returns."""

    def issue(self, copy: Callable[[], object], keep: Sequence[torch.Tensor]) -> Transfer:
        """Run `copy` (which issues the copies), ordered after the work issued so far on the current stream, and
        return the copies in flight; `keep` (their source and host ends) stays alive until they are complete."""
        copy()
        return COMPLETED

    def synchronize(self) -> None:
        """Block the host until every copy issued here is complete (the step's boundary)."""
