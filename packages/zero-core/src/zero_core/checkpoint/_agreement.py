"""The ranks of a save agree before anything is written: on the tag, and on whether the save can go ahead.

One all-gather carries each rank's tag and what, if anything, it found wrong (a tag that is not a
name, a client_state it cannot store); one broadcast carries rank 0's staging directory or why it
could not make one. Every rank then raises the same error, or none does: a rank that raised alone
would leave its peers waiting in the save's next collective.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from zero_plugins import ZeroError

from zero_plugins.ds_config import TagValidation
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
    answers = _all_gather([tag if isinstance(tag, str) else repr(tag), problem])
    for rank, (_, rank_problem) in enumerate(answers):
        if rank_problem is not None:
            raise ZeroError(rank_problem if len(answers) == 1 else f"rank {rank}: {rank_problem}")
    tags = [str(rank_tag) for rank_tag, _ in answers]
    if len(set(tags)) > 1:
        _differing_tags(tags, engine.zero_config.checkpoint.tag_validation)
    return tags[0], training  # every rank's tag passed check_tag above, rank 0's among them


def rank_zero_outcome(work: Callable[[], str], rank: int) -> str:
    """Run `work` on rank 0 and hand its result to every rank; if it raised, every rank raises its error."""
    outcome: list[Any] = [None, None]
    if rank == 0:
        try:
            outcome = [work(), None]
        except (ZeroError, OSError) as error:
            outcome = [None, str(error)]
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(outcome, src=0)  # also the barrier: no rank writes before the directory exists
    result, failure = outcome
    if failure is not None:
        raise ZeroError(failure if rank == 0 else f"rank 0: {failure}")
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


def _all_gather(value: list[Any]) -> list[list[Any]]:
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered
