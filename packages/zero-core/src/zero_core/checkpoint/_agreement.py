"""The ranks of a save agree before anything is written: on the tag, and on whether the save can go ahead.

One all-gather carries each rank's tag and what, if anything, it found wrong (a tag that is not a
name, a client_state it cannot store); one broadcast carries rank 0's staging directory or why it
could not make one. Every rank then raises the same error, or none does: a rank that raised alone
would leave its peers waiting in the save's next collective. A peer lost in either (killed, crashed) is a
CollectiveFailed naming it, as in training.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from zero_plugins import ZeroError

from ..comm import RankProgress, guarded

from zero_plugins.ds_config import TagValidation
from ._errors import CheckpointError
from ._tags import check_tag
from ._training import TrainingEngine, training_state

log = logging.getLogger("zero_core.checkpoint")


def agree_on_save(engine: TrainingEngine, tag: object, client_state: Any) -> tuple[str, dict[str, Any]]:
    """(Every rank) the tag every rank saves under (rank 0's) and this rank's training state; one error on every
    rank if any rank's tag is not a valid tag, its client_state cannot be stored, or (with tag_validation Fail)
    the tags differ."""
    problem: str | None = None
    training: dict[str, Any] = {}
    try:
        check_tag(tag, "save_checkpoint: tag")
        training = training_state(engine, client_state)
    except ZeroError as error:
        problem = str(error)
    answers = _all_gather([tag if isinstance(tag, str) else repr(tag), problem], engine.progress)
    for rank, (_, rank_problem) in enumerate(answers):
        if rank_problem is not None:
            raise ZeroError(rank_problem if len(answers) == 1 else f"rank {rank}: {rank_problem}")
    tags = [str(rank_tag) for rank_tag, _ in answers]
    if len(set(tags)) > 1:
        _differing_tags(tags, engine.zero_config.checkpoint.tag_validation)
    return tags[0], training  # every rank's tag passed check_tag above, rank 0's among them


def rank_zero_outcome(work: Callable[[], str], rank: int, progress: RankProgress,
                      group: dist.ProcessGroup | None = None) -> str:
    """Run `work` on rank 0 and hand its result to every rank of `group`; if it raised, every rank raises its
    error (a CheckpointError; rank 0's chained to what it caught)."""
    outcome: list[Any] = [None, None]
    raised: BaseException | None = None
    if rank == 0:
        try:
            outcome = [work(), None]
        except (ZeroError, OSError) as error:
            raised, outcome = error, [None, str(error)]
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        with guarded("save_checkpoint's broadcast from rank 0", progress):
            dist.broadcast_object_list(outcome, src=0, group=group)  # also a barrier: rank 0 acts first
    result, failure = outcome
    if isinstance(raised, CheckpointError):
        raise raised
    if failure is not None:
        raise CheckpointError(failure if rank == 0 else f"rank 0: {failure}") from raised
    return str(result)


def _differing_tags(tags: list[str], mode: TagValidation) -> None:
    by_rank = ", ".join(f"rank {rank} {tag!r}" for rank, tag in enumerate(tags))
    if mode is TagValidation.FAIL:
        raise ZeroError(f"save_checkpoint: the ranks passed different tags ({by_rank}); nothing was written. Pass "
                        "every rank the same tag (build it from engine.global_steps, not from time or the rank), "
                        "or set checkpoint.tag_validation to Warn or Ignore to save under rank 0's tag")
    if mode is TagValidation.WARN and dist.get_rank() == 0:
        log.warning("save_checkpoint: the ranks passed different tags (%s); every rank saves under rank 0's, %r "
                    "(checkpoint.tag_validation is Warn)", by_rank, tags[0])


def _all_gather(value: list[Any], progress: RankProgress) -> list[list[Any]]:
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    with guarded("save_checkpoint's all-gather of the tags", progress):
        dist.all_gather_object(gathered, value)
    return gathered
