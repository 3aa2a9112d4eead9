"""Batch runs: one row per call of a batch handler (``runnerq_django.activities.batch``) in the
app's own table ``runnerq_batch_runs``, naming its members and the attempt each ran, so the
admin links a batch's members to each other. Written by the member thread that calls the handler,
just before the call; deleted with the members' trees by retention and ``delete_tree`` (a row
goes when the last of its members does). Statements in ``storage.sql.batches``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import batches as q

__all__ = ["MAX_MEMBERS_SHOWN", "BatchCall", "batches_of", "record"]

MAX_MEMBERS_SHOWN = 100  # the other members one call lists (its member count says how many)
MAX_CALLS_SHOWN = 20  # the batch calls of one activity listed (one per attempt that ran in one)


@dataclass(frozen=True)
class BatchCall:
    """A batch call seen from one member: the attempt it ran, how many members the call had, and
    the others (at most ``MAX_MEMBERS_SHOWN``, in the order the handler got them) as
    (id, attempt) pairs."""

    batch_id: uuid.UUID
    activity_type: str
    queue: str
    started_at: datetime
    attempt: int | None
    size: int
    others: list[tuple[uuid.UUID, int]]

    @property
    def others_cut(self) -> int:
        """How many other members are not listed."""
        return max(0, self.size - 1 - len(self.others))


@db.operation
def record(
    activity_type: str,
    queue: str,
    members: Sequence[tuple[uuid.UUID, int]],
    *,
    batch_id: uuid.UUID | None = None,
    using: str | None = None,
) -> uuid.UUID:
    """Record one call of a batch handler with its ``members`` ((id, attempt) pairs, in the order
    the handler gets them); returns the batch's id. Runs on the calling thread's connection: one
    statement in autocommit, or in a savepoint inside the caller's transaction."""
    if not members:
        raise check.invalid("members", "a batch call records at least one member")
    batch = batch_id or uuid.uuid4()
    alias = db.alias_for(using)
    params = {
        "batch": batch,
        "type": activity_type,
        "queue": queue,
        "ids": [m[0] for m in members],
        "attempts": [int(m[1]) for m in members],
    }
    if db.in_transaction(alias):  # a savepoint: a failure must not abort the caller's transaction
        with db.atomic(alias):
            db.fetch_one(alias, q.RECORD, params)
    else:  # a worker's executor thread (autocommit): the statement alone
        db.fetch_one(alias, q.RECORD, params)
    return batch


@db.operation
def batches_of(
    activity_id: uuid.UUID,
    *,
    calls: int = MAX_CALLS_SHOWN,
    members: int = MAX_MEMBERS_SHOWN,
    using: str | None = None,
) -> list[BatchCall]:
    """The batch calls ``activity_id`` was a member of, newest first (at most ``calls``), each with
    at most ``members`` of its other members."""
    check.integer("calls", calls, 1, 1000)
    check.integer("members", members, 1, 10_000)
    rows = db.fetch_all(
        db.alias_for(using), q.BATCHES_OF, {"id": activity_id, "calls": calls, "members": members}
    )
    return [
        BatchCall(
            batch_id=row[0],
            activity_type=row[1],
            queue=row[2],
            started_at=row[3],
            attempt=row[4],
            size=int(row[5]),
            others=[(uuid.UUID(str(i)), int(a)) for i, a in json.loads(row[6])],
        )
        for row in rows
    ]
