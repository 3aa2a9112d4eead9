"""Retention: finished trees older than their window go, whole, with everything they own."""

from __future__ import annotations

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import retention as sql_retention

# Events trimmed per call by the events window, per unit of ``batch`` (they don't count
# towards the returned number, but one call must stay a bounded amount of work).
EVENTS_PER_BATCH_UNIT = 10


@db.operation
def cleanup(
    queue: str,
    *,
    completed_s: int = 0,
    failed_s: int = 0,
    events_s: int = 0,
    batch: int = 500,
    using: str | None = None,
) -> int:
    """Delete up to ``batch`` finished trees whose root finished longer ago than its window
    (``completed_s`` for completed roots; ``failed_s`` for failed, dead-lettered and cancelled
    ones; 0 turns a class off), and trim events of finished activities older than ``events_s``
    (0: events live as long as their tree). Returns the number of roots deleted.

    A tree goes with its activities, inputs, events, results (its own and those it owns:
    checkpoints, signals), its progress, published events and batch runs (the app's
    ``runnerq_progress``, ``runnerq_published_events`` and ``runnerq_batch_runs``: a batch's row
    goes with its last member), its dependency rows and the idempotency keys pointing into it. A
    root stays while any descendant is unfinished, or while a live activity elsewhere awaits
    one of its members.
    """
    queue = check.queue_name(queue)
    windows = {
        "completed_s": check.integer("completed_s", completed_s, 0, check.MAX_DURATION_SECONDS),
        "failed_s": check.integer("failed_s", failed_s, 0, check.MAX_DURATION_SECONDS),
        "events_s": check.integer("events_s", events_s, 0, check.MAX_DURATION_SECONDS),
    }
    check.integer("batch", batch, 1, check.MAX_BATCH)
    alias = db.alias_for(using)
    params = {"queue": queue, "batch": batch, "limit": batch * EVENTS_PER_BATCH_UNIT, **windows}
    deleted = 0
    with db.atomic(alias):
        if completed_s or failed_s:
            statement = sql_retention.cleanup_trees(completed=bool(completed_s), failed=bool(failed_s))
            deleted = int(db.fetch_row(alias, statement, params)[0])
        if events_s:
            db.fetch_one(alias, sql_retention.CLEANUP_EVENTS, params)
    return deleted
