"""Flow control's state, in the app's own tables: paused queues and types, and the
ledger of every change to them. Claims read the pauses in their own statement
(``storage.sql.claims.CLAIMABLE``), so a pause takes effect at every worker's next claim; a resume
also wakes the queue's workers.

Like every storage operation: arguments are checked before any SQL runs (``InvalidArgument``),
the statements are in ``storage.sql.pauses``, and database failures become the spec's error kinds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_django.spec.constants import work_channel
from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import pauses as sql_pauses

__all__ = [
    "FlowChange",
    "Pause",
    "ledger",
    "pause",
    "pause_counts",
    "pause_total",
    "pauses",
    "pauses_in",
    "resume",
]

MAX_ACTOR_BYTES = 512
MAX_LEDGER_ROWS = 1000


@dataclass(frozen=True)
class Pause:
    queue_name: str
    activity_type: str  # "" when the whole queue is paused
    paused_by: str
    reason: str
    paused_at: datetime

    @property
    def whole_queue(self) -> bool:
        return not self.activity_type


@dataclass(frozen=True)
class FlowChange:
    id: int
    action: str  # "pause" or "resume"
    queue_name: str
    activity_type: str
    actor: str
    reason: str
    detail: dict[str, Any]
    at: datetime


def _params(queue: str, activity_type: str | None, actor: str, reason: str) -> dict[str, Any]:
    queue = check.queue_name(queue)
    kind = "" if activity_type is None else check.text("activity_type", activity_type, check.MAX_TYPE_BYTES)
    return {
        "queue": queue,
        "type": kind,
        "actor": check.text("actor", actor, MAX_ACTOR_BYTES),
        "reason": check.text("reason", reason, check.MAX_REASON_BYTES, allow_empty=True),
        "work_channel": work_channel(queue),
    }


@db.operation
def pause(
    queue: str, activity_type: str | None = None, *, actor: str, reason: str = "", using: str | None = None
) -> bool:
    """Pause ``queue`` (``activity_type`` None) or one type in it, fleet-wide: claims skip it from
    the next one on; running attempts finish. Pausing again updates who and why. Returns whether
    it was not paused before. Recorded in the flow ledger."""
    row = db.fetch_one(db.alias_for(using), sql_pauses.PAUSE, _params(queue, activity_type, actor, reason))
    return bool(row and row[0])


@db.operation
def resume(
    queue: str, activity_type: str | None = None, *, actor: str, reason: str = "", using: str | None = None
) -> bool:
    """Resume a paused queue or type and wake the queue's workers. Returns whether it was paused
    (resuming what is not paused does nothing and records nothing). A type paused on its own stays
    paused when its queue resumes, and the other way round."""
    row = db.fetch_one(db.alias_for(using), sql_pauses.RESUME, _params(queue, activity_type, actor, reason))
    return bool(row and row[0])


@db.operation
def pauses(
    *, limit: int | None = None, after: tuple[str, str] | None = None, using: str | None = None
) -> list[Pause]:
    """The pauses in effect, by queue then type (the whole queue first): every one, or at most
    ``limit`` (1..1000) after the (queue, type) ``after`` (a page of a list)."""
    if limit is not None:
        limit = check.integer("limit", limit, 1, check.MAX_BATCH)
    after_queue, after_type = after or ("", "")
    check.text("after", after_queue, check.MAX_TYPE_BYTES, allow_empty=True)
    check.text("after", after_type, check.MAX_TYPE_BYTES, allow_empty=True)
    params = {"limit": limit, "after_queue": after_queue, "after_type": after_type}
    return [Pause(*row) for row in db.fetch_all(db.alias_for(using), sql_pauses.LIST_PAUSES, params)]


@db.operation
def pauses_in(queues: list[str], limit: int, *, using: str | None = None) -> list[Pause]:
    """The first ``limit`` (1..1000) pauses of each of ``queues``, by queue then type."""
    limit = check.integer("limit", limit, 1, check.MAX_BATCH)
    names = [check.text("queues[]", queue, check.MAX_TYPE_BYTES) for queue in queues]
    rows = db.fetch_all(db.alias_for(using), sql_pauses.PAUSES_IN, {"queues": names, "limit": limit})
    return [Pause(*row) for row in rows]


@db.operation
def pause_counts(queues: list[str], *, using: str | None = None) -> dict[str, int]:
    """How many pauses each of ``queues`` has (a queue without one is left out)."""
    names = [check.text("queues[]", queue, check.MAX_TYPE_BYTES) for queue in queues]
    rows = db.fetch_all(db.alias_for(using), sql_pauses.PAUSE_COUNTS, {"queues": names})
    return {queue: int(count) for queue, count in rows}


@db.operation
def pause_total(*, using: str | None = None) -> int:
    """How many pauses are in effect, in every queue."""
    return int(db.fetch_all(db.alias_for(using), sql_pauses.PAUSE_TOTAL)[0][0])


@db.operation
def ledger(limit: int = 100, *, using: str | None = None) -> list[FlowChange]:
    """The latest ``limit`` (1..1000) pauses and resumes, newest first."""
    limit = check.integer("limit", limit, 1, MAX_LEDGER_ROWS)
    rows = db.fetch_all(db.alias_for(using), sql_pauses.LIST_LEDGER, {"limit": limit})
    return [
        FlowChange(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), row[7]) for row in rows
    ]
