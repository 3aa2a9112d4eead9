"""Worker pool rows (``runnerq_worker_pools``): who serves which queue, with how many slots.

One row per worker process and queue, kept alive by heartbeat (``last_seen_at``). Other SDKs'
consoles read the same rows, so a Python worker shows up beside Go and TypeScript ones. Rows of
workers that died without deregistering are pruned once they are clearly stale.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable

from django.db import connections

from runnerq_django import conf


@dataclass(frozen=True)
class QueueCapacity:
    queue_name: str
    workers: int  # live pool rows
    slots: int  # sum of their max_workers


def _cursor(using: str | None):
    return connections[using or conf.database_alias()].cursor()


def register(pool_id: uuid.UUID, queue: str, max_workers: int, activity_types: list[str] | None, *,
             using: str | None = None) -> None:
    with _cursor(using) as cursor:
        cursor.execute(
            """
            INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, activity_types)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (pool_id) DO UPDATE
               SET queue_name = EXCLUDED.queue_name, max_workers = EXCLUDED.max_workers,
                   activity_types = EXCLUDED.activity_types, last_seen_at = now()
            """,
            [pool_id, queue, max_workers, activity_types],
        )


def heartbeat(pool_ids: Iterable[uuid.UUID], *, using: str | None = None) -> set[uuid.UUID]:
    """Mark pools alive; returns the ids that still had a row (a missing one was pruned while
    this worker could not reach the database, and should register again)."""
    ids = list(pool_ids)
    if not ids:
        return set()
    with _cursor(using) as cursor:
        cursor.execute(
            "UPDATE runnerq_worker_pools SET last_seen_at = now() WHERE pool_id = ANY(%s) RETURNING pool_id",
            [ids],
        )
        return {row[0] for row in cursor.fetchall()}


def deregister(pool_ids: Iterable[uuid.UUID], *, using: str | None = None) -> int:
    ids = list(pool_ids)
    if not ids:
        return 0
    with _cursor(using) as cursor:
        cursor.execute("DELETE FROM runnerq_worker_pools WHERE pool_id = ANY(%s)", [ids])
        return cursor.rowcount


def prune(stale_seconds: float, *, using: str | None = None) -> int:
    """Delete rows not seen for ``stale_seconds`` (workers killed without a clean stop)."""
    with _cursor(using) as cursor:
        cursor.execute(
            "DELETE FROM runnerq_worker_pools WHERE last_seen_at < now() - make_interval(secs => %s)",
            [float(stale_seconds)],
        )
        return cursor.rowcount


def live_capacity(alive_seconds: float, *, using: str | None = None) -> dict[str, QueueCapacity]:
    """Per queue, the pools seen within ``alive_seconds`` and their slots."""
    with _cursor(using) as cursor:
        cursor.execute(
            """
            SELECT queue_name, count(*), coalesce(sum(max_workers), 0)
              FROM runnerq_worker_pools
             WHERE last_seen_at >= now() - make_interval(secs => %s)
             GROUP BY queue_name
            """,
            [float(alive_seconds)],
        )
        return {row[0]: QueueCapacity(row[0], row[1], int(row[2])) for row in cursor.fetchall()}
