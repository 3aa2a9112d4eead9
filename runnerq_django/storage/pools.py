"""Worker pool rows (``runnerq_worker_pools``): who serves which queue, with how many slots.

One row per worker process and queue, kept alive by heartbeat (``last_seen_at``). Other SDKs'
consoles read the same rows, so a Python worker shows up beside Go and TypeScript ones. Rows of
workers that died without deregistering are pruned once they are clearly stale.

Like every storage operation: arguments are checked before any SQL runs (``InvalidArgument``),
the statements are in ``sql``, and database failures become the spec's error kinds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import pools as sql_pools


@dataclass(frozen=True)
class QueueCapacity:
    queue_name: str
    workers: int  # live pool rows
    slots: int  # sum of their max_workers


def _pool_ids(pool_ids: Iterable[Any]) -> list[uuid.UUID]:
    ids = [check.activity_id(f"pool_ids[{index}]", value) for index, value in enumerate(pool_ids)]
    if len(ids) > check.MAX_BATCH:
        raise check.invalid("pool_ids", f"at most {check.MAX_BATCH} per call, got {len(ids)}")
    return ids


def _seconds(field: str, value: Any) -> float:
    seconds = check.number(field, value, 0, check.MAX_DURATION_SECONDS)
    if seconds <= 0:
        raise check.invalid(field, f"must be more than 0 seconds, got {value}")
    return float(seconds)


@db.operation
def register(
    pool_id: uuid.UUID,
    queue: str,
    max_workers: int,
    activity_types: list[str] | None,
    *,
    using: str | None = None,
) -> None:
    """Insert or refresh this pool's row: ``max_workers`` slots (1..2**31-1) serving
    ``activity_types`` (``None``: every type) on ``queue``."""
    params = {
        "pool_id": check.activity_id("pool_id", pool_id),
        "queue": check.queue_name(queue),
        "max_workers": check.integer("max_workers", max_workers, 1, check.MAX_INT4),
    }
    params["activity_types"] = check.types_filter(activity_types, "activity_types")
    db.fetch_one(db.alias_for(using), sql_pools.POOL_REGISTER, params)


@db.operation
def heartbeat(pool_ids: Iterable[uuid.UUID], *, using: str | None = None) -> set[uuid.UUID]:
    """Mark pools alive; returns the ids that still had a row (a missing one was pruned while
    this worker could not reach the database, and should register again)."""
    ids = _pool_ids(pool_ids)
    if not ids:
        return set()
    return {row[0] for row in db.fetch_all(db.alias_for(using), sql_pools.POOL_HEARTBEAT, {"ids": ids})}


@db.operation
def deregister(pool_ids: Iterable[uuid.UUID], *, using: str | None = None) -> int:
    """Delete these pools' rows (a clean stop); returns how many there were."""
    ids = _pool_ids(pool_ids)
    if not ids:
        return 0
    return int(db.fetch_row(db.alias_for(using), sql_pools.POOL_DEREGISTER, {"ids": ids})[0])


@db.operation
def prune(stale_seconds: float, *, using: str | None = None) -> int:
    """Delete rows not seen for ``stale_seconds`` (> 0: workers killed without a clean stop)."""
    params = {"seconds": _seconds("stale_seconds", stale_seconds)}
    return int(db.fetch_row(db.alias_for(using), sql_pools.POOL_PRUNE, params)[0])


@db.operation
def live_capacity(alive_seconds: float, *, using: str | None = None) -> dict[str, QueueCapacity]:
    """Per queue, the pools seen within ``alive_seconds`` (> 0) and their slots."""
    params = {"seconds": _seconds("alive_seconds", alive_seconds)}
    rows = db.fetch_all(db.alias_for(using), sql_pools.POOL_CAPACITY, params)
    return {row[0]: QueueCapacity(row[0], row[1], int(row[2])) for row in rows}
