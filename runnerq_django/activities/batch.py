"""Batch handlers: one call of the handler for many activities of its type.

``@activity(name="emails.send", batch=BatchOptions(max_size=100, max_wait=timedelta(seconds=2)))``
makes the handler take a list of :class:`BatchItem` (each activity's ``id``, ``payload`` and
``attempt``), claimed together: up to ``max_size`` of them, the first one waiting at most
``max_wait`` for the batch to fill. Every activity keeps its own life (its lease, its fencing,
its time limit, its retries and events): the handler returns one result per item (a list in the
items' order, ``None`` for every result ``None``, or a :class:`BatchResult` naming the items that
failed and why), or raises, which fails every item of the batch.

Producers enqueue the activities one by one, as ever (a Go or TypeScript producer too): the batch
is the worker's, never stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from runnerq_django.activities import arguments
from runnerq_django.exceptions import RunnerQError

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_BATCH_WAIT_SECONDS",
    "BatchFailed",
    "BatchInterrupted",
    "BatchItem",
    "BatchOptions",
    "BatchResult",
]

MAX_BATCH_SIZE = 1000
MAX_BATCH_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class BatchOptions:
    """How a batch handler's activities are gathered: at most ``max_size`` per call, and, once one
    is due, at most ``max_wait`` (seconds or a ``timedelta``) waiting for the batch to fill.

    A worker gathers at most its ``--concurrency`` of them at once (each activity holds one of
    its slots, as one running alone does)."""

    max_size: int = 100
    max_wait: float | timedelta = 1.0

    def __post_init__(self) -> None:
        size = arguments.whole_number(self.max_size, "batch.max_size", minimum=1, maximum=MAX_BATCH_SIZE)
        wait = arguments.seconds(self.max_wait, "batch.max_wait", minimum=0, maximum=MAX_BATCH_WAIT_SECONDS)
        object.__setattr__(self, "max_size", size)
        object.__setattr__(self, "max_wait", wait)

    @property
    def max_wait_seconds(self) -> float:
        wait = self.max_wait
        return wait.total_seconds() if isinstance(wait, timedelta) else float(wait)


def checked(value: Any) -> BatchOptions | None:
    """The ``batch=`` option of ``@activity``: a :class:`BatchOptions` or ``None``."""
    if value is None or isinstance(value, BatchOptions):
        return value
    raise arguments.invalid("batch", f"must be a BatchOptions(max_size=..., max_wait=...), got {value!r}")


def check_handler(definition: Any, options: BatchOptions) -> None:
    """A batch handler is a sync function of one parameter (the items) run on a thread."""
    if definition.is_async:
        raise arguments.invalid("batch", f"batch handlers are sync functions; {definition.name} is async")
    if definition.declared.options.isolation != "thread":  # (not .options: no settings at import)
        raise arguments.invalid("batch", "batch handlers run with isolation='thread'")
    if definition.takes_context:
        raise arguments.invalid(
            "batch",
            f"a batch handler takes one parameter, the list of BatchItem; {definition.name} takes more",
        )


@dataclass(frozen=True)
class BatchItem:
    """One activity of a batch: its id, its payload (as a one-at-a-time handler gets it) and
    its attempt number (1 for the first)."""

    id: uuid.UUID
    payload: Any
    attempt: int
    activity_type: str
    queue: str
    metadata: Mapping[str, str] | None = None


@dataclass(frozen=True)
class BatchResult:
    """What a batch handler returns when some items failed: ``results`` by item id (an item not
    in either mapping completes with ``None``), ``failed`` by item id, an exception (its class
    decides a retry as the type's ``retry_on`` / ``no_retry_on`` do; ``NonRetryableError`` fails
    it for good) or a message (a retryable :class:`BatchFailed`). Only the failed items are
    retried or dead-lettered; the others complete."""

    results: Mapping[uuid.UUID, Any] = field(default_factory=dict)
    failed: Mapping[uuid.UUID, BaseException | str] = field(default_factory=dict)


class BatchFailed(RunnerQError):
    """An item a batch handler named as failed with a message (retryable)."""


class BatchInterrupted(RunnerQError):
    """The batch's handler was stopped by another member's interrupt (its time limit, its lost
    claim): the items still held are failed with this, retryable."""
