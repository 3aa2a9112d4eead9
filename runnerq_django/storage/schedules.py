"""Storage operations of runtime schedules (``runnerq_schedules``): the tick's change check, the
row lock of an enqueue, the occurrence count, the LISTEN on changes, and the read of
django-celery-beat's tables for ``runnerq_import_beat``. The statements are named in
``storage.sql.schedules``; the rows themselves are written through the ORM
(``runnerq_django.scheduler.rows``), whose writes the table's triggers revise.
"""

from __future__ import annotations

from typing import Any

from runnerq_django.storage import db
from runnerq_django.storage.sql import schedules as q


@db.operation
def version(*, using: str | None = None) -> tuple[int, int]:
    """``(count, max change_seq)``: changes with every insert, change and delete."""
    row = db.fetch_one(db.alias_for(using), q.SCHEDULES_VERSION)
    return (int(row[0]), int(row[1])) if row else (0, 0)


@db.operation
def enabled_seqs(*, using: str | None = None) -> dict[str, int]:
    """Each enabled schedule's ``change_seq``, by id."""
    return {str(row[0]): int(row[1]) for row in db.fetch_all(db.alias_for(using), q.ENABLED_SCHEDULES)}


@db.operation
def lock(schedule_id: str, *, using: str | None = None) -> tuple[int, bool, int, int | None] | None:
    """Lock a schedule's row in the caller's transaction: ``(revision, enabled, occurrence_count,
    max_occurrences)``, None when it is gone."""
    row = db.fetch_one(db.alias_for(using), q.LOCK_SCHEDULE, {"id": schedule_id})
    return None if row is None else (int(row[0]), bool(row[1]), int(row[2]), row[3])


@db.operation
def count_occurrences(schedule_id: str, count: int, *, using: str | None = None) -> None:
    db.fetch_one(db.alias_for(using), q.COUNT_OCCURRENCES, {"id": schedule_id, "count": count})


def listen(*, using: str | None = None) -> Any:
    """``LISTEN runnerq_schedules`` on the Django connection of ``using``; its psycopg session."""
    from django.db import connections

    alias = db.alias_for(using)
    db.fetch_one(alias, q.LISTEN_SCHEDULES)
    return connections[alias].connection


def beat_tasks(*, using: str | None = None) -> list[dict[str, Any]]:
    """django-celery-beat's periodic tasks with their schedules, by name (raises the database's
    error when its tables are not there)."""
    rows = db.fetch_all(db.alias_for(using), q.BEAT_TASKS)
    return [dict(zip(q.BEAT_TASK_COLUMNS, row)) for row in rows]


__all__ = ["beat_tasks", "count_occurrences", "enabled_seqs", "listen", "lock", "version"]
