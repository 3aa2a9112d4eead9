"""Test support: the runnable activities due later, and making chosen ones due now.

``runnerq_django.testing`` fast-forwards delays, retry backoffs and durable timers with these
instead of waiting for them. Making an activity due writes no event (no event marks the moment a
timer comes due under a worker either); the claim that follows records what a worker's would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import fast_forward as sql_fast_forward


@dataclass(frozen=True)
class DueLater:
    id: uuid.UUID
    status: str
    scheduled_at: datetime
    awaits_result: bool  # parked on a signal or a child (its timer is a timeout, or the recheck)


@db.operation
def due_later(
    queue: str,
    *,
    types: Iterable[str] | None = None,
    root_id: uuid.UUID | None = None,
    using: str | None = None,
) -> list[DueLater]:
    """Runnable activities of ``queue`` (of ``types``, of the tree of ``root_id``) scheduled
    after now, soonest first."""
    params = {
        "queue": check.queue_name(queue),
        "types": check.types_filter(types),
        "root": None if root_id is None else check.activity_id("root_id", root_id),
    }
    return [DueLater(*row) for row in db.fetch_all(db.alias_for(using), sql_fast_forward.DUE_LATER, params)]


@db.operation
def make_due(queue: str, ids: Iterable[uuid.UUID], *, using: str | None = None) -> list[uuid.UUID]:
    """Schedule these runnable activities for now; returns the ids changed (the others had
    become due, been claimed or finished meanwhile)."""
    params = {"queue": check.queue_name(queue), "ids": [check.activity_id("ids", i) for i in ids]}
    return [row[0] for row in db.fetch_all(db.alias_for(using), sql_fast_forward.MAKE_DUE, params)]
