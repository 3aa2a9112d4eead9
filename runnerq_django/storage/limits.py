"""Concurrency limits: at most N activities of a type running at once across every
runnerq-django worker, optionally per partition key; a limit of 1 per key is a lock.

The slots are rows of the app's own ``runnerq_flow_slots``, taken by the claim of the limited
type in its own statement (``storage.sql.flow_limits.claim_limited``) and free again as soon as
their activity leaves ``processing`` under the slot's token -- complete, fail, release, cancel or
reap, a worker killed with ``kill -9`` included once its leases are reaped -- with no statement of
those paths changed: the next claim that needs such a slot takes its row over in place. Partition keys
are written at enqueue to ``runnerq_flow_partitions``. Retention's sweep (``sweep_slots``,
``sweep_partitions``) deletes free slot rows and the partition keys no claim can need again, so
neither table grows with the number of partition keys ever seen. Go and TypeScript workers claiming the same
type take no slot and are not limited.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from runnerq_django.spec.constants import work_channel
from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.attempts import _claimed, _fail_undecodable, once_per_text
from runnerq_django.storage.decode import Undecodable
from runnerq_django.storage.sql import claims as sql_claims
from runnerq_django.storage.sql import flow_limits as sql_flow_limits
from runnerq_django.storage.types import Claim, ClaimedActivity

__all__ = [
    "MAX_PARTITION_KEY_BYTES",
    "SlotUse",
    "SweepPage",
    "claim_limited",
    "notify_work",
    "record_partitions",
    "slots_in_use",
    "sweep_partitions",
    "sweep_slots",
]

MAX_PARTITION_KEY_BYTES = 512
MAX_RUNNING = 10_000
# Candidates read per claim beyond its limit: rows of partitions already at their limit are
# passed over (and stay runnable), and so are rows other claims hold, so the walk reads more rows
# than it claims (each costs the walk, its input test and its partition's probe).
CANDIDATES_FACTOR = 2
CANDIDATES_EXTRA = 16


@dataclass(frozen=True)
class SlotUse:
    queue_name: str
    activity_type: str
    running: int  # slots whose activity is running
    partitions: int  # partitions with a slot row (running, or given back and not yet swept)


@db.operation
def claim_limited(
    queue: str,
    activity_type: str,
    max_running: int,
    *,
    limit: int = 1,
    lease_ms: int = 30000,
    worker_id: str = "",
    superjson_mode: str = "plain",
    using: str | None = None,
) -> list[ClaimedActivity]:
    """Claim up to ``limit`` due activities of ``activity_type``, each only with a free slot of
    its partition (at most ``max_running`` running per partition, fleet-wide). One round trip.
    An activity left without a slot stays as it is (no attempt counted) for a later claim."""
    queue = check.queue_name(queue)
    check.text("activity_type", activity_type, check.MAX_TYPE_BYTES)
    check.integer("max_running", max_running, 1, MAX_RUNNING)
    return _claim_slotted(
        sql_flow_limits.claim_limited,
        queue,
        activity_type,
        {"max_running": max_running},
        limit=limit,
        lease_ms=lease_ms,
        worker_id=worker_id,
        superjson_mode=superjson_mode,
        using=using,
    )


def _claim_slotted(
    statement: Callable[[str], str],
    queue: str,
    activity_type: str,
    limit_params: dict[str, Any],
    *,
    limit: int,
    lease_ms: int,
    worker_id: str,
    superjson_mode: str,
    using: str | None,
) -> list[ClaimedActivity]:
    """What the two slotted claims share once each checked its own limit (``limit_params``):
    check the claim's options, build the parameters and run ``statement(token)``."""
    check.integer("limit", limit, 1, check.MAX_BATCH)
    check.integer("lease_ms", lease_ms, 1, check.MAX_LEASE_MS)
    check.text("worker_id", worker_id, check.MAX_WORKER_ID_BYTES, allow_empty=True)
    params: dict[str, Any] = {
        "queue": queue,
        "type": activity_type,
        **limit_params,
        "limit": limit,
        "candidates": limit * CANDIDATES_FACTOR + CANDIDATES_EXTRA,
        "lease_ms": lease_ms,
    }
    token = _token(params, worker_id)
    return _claimed_rows(queue, statement(token), params, superjson_mode, db.alias_for(using))


def _token(params: dict[str, Any], worker_id: str) -> str:
    if worker_id:
        params["token_prefix"] = worker_id + ":"
        return sql_claims.TOKEN_FROM_WORKER
    return sql_claims.TOKEN_ANONYMOUS


def _claimed_rows(
    queue: str, statement: str, params: dict[str, Any], superjson_mode: str, alias: str
) -> list[ClaimedActivity]:
    # Prepared, its row bounds literals (as the usual claim): planning this statement took as
    # long as running it.
    rows = db.fetch_all_prepared(alias, sql_claims.with_bounds(statement, params), params)
    if not rows:
        return []
    load_timestamp = once_per_text(db.timestamptz_loader(alias))
    claimed: list[tuple[int, ClaimedActivity]] = []
    for row in rows:
        try:
            claimed.append((row[0], _claimed(queue, row, load_timestamp, superjson_mode)))
        except Undecodable as exc:
            _fail_undecodable(queue, Claim(row[1], row[2]), str(exc), alias)
    claimed.sort(key=lambda pair: pair[0])
    return [activity for _, activity in claimed]


@db.operation
def claim_rated(
    queue: str,
    activity_type: str,
    max_starts: int,
    period_seconds: float,
    *,
    limit: int = 1,
    lease_ms: int = 30000,
    worker_id: str = "",
    superjson_mode: str = "plain",
    using: str | None = None,
) -> list[ClaimedActivity]:
    """Claim up to ``limit`` due activities of ``activity_type``, each only with a start left in
    the current window of its partition (at most ``max_starts`` per ``period_seconds``, fixed
    windows on the database clock, fleet-wide). One round trip."""
    queue = check.queue_name(queue)
    check.text("activity_type", activity_type, check.MAX_TYPE_BYTES)
    check.integer("max_starts", max_starts, 1, MAX_RUNNING)
    check.number("period_seconds", period_seconds, 0.001, 86400)
    return _claim_slotted(
        sql_flow_limits.claim_rated,
        queue,
        activity_type,
        {"max_starts": max_starts, "period": float(period_seconds)},
        limit=limit,
        lease_ms=lease_ms,
        worker_id=worker_id,
        superjson_mode=superjson_mode,
        using=using,
    )


@db.operation
def record_partitions(
    queue: str,
    activity_type: str,
    keys: Iterable[tuple[uuid.UUID, str]],
    *,
    using: str | None = None,
) -> None:
    """Store the partition key of each (new) activity, in the caller's transaction (the enqueue's),
    so that no worker can claim the activity before its key is there."""
    queue = check.queue_name(queue)
    check.text("activity_type", activity_type, check.MAX_TYPE_BYTES)
    rows = []
    for index, (activity_id, key) in enumerate(keys):
        check.text(f"partition_key[{index}]", key, MAX_PARTITION_KEY_BYTES, allow_empty=True)
        rows.append({"id": str(activity_id), "partition_key": key})
    if rows:
        db.fetch_one(
            db.alias_for(using),
            sql_flow_limits.INSERT_PARTITIONS,
            {"queue": queue, "type": activity_type, "rows": json.dumps(rows)},
        )


@db.operation
def notify_work(queue: str, *, using: str | None = None) -> None:
    """Wake the workers of ``queue``: a concurrency slot was given back."""
    queue = check.queue_name(queue)
    db.fetch_one(db.alias_for(using), sql_flow_limits.NOTIFY_WORK, {"work_channel": work_channel(queue)})


@db.operation
def slots_in_use(*, using: str | None = None) -> list[SlotUse]:
    """Per limited queue and type: running slots and partitions seen."""
    return [SlotUse(*row) for row in db.fetch_all(db.alias_for(using), sql_flow_limits.SLOTS_IN_USE)]


# Rows examined per sweep statement (each statement walks one page of its table in key order).
SWEEP_PAGE = 2000
_SLOTS_START: tuple[str, str, int] = ("", "", -1)  # before every key (slot numbers are >= 0)
_PARTITIONS_START = uuid.UUID(int=0)


@dataclass(frozen=True)
class SweepPage:
    """One statement of the flow-control sweep: rows deleted, rows examined, and where the next
    statement goes on (``None``: the walk reached the end of the table and starts over)."""

    deleted: int
    examined: int
    after: Any


@db.operation
def sweep_slots(
    queue: str,
    *,
    after: tuple[str, str, int] | None = None,
    idle_s: int = 0,
    page: int = SWEEP_PAGE,
    using: str | None = None,
) -> SweepPage:
    """Delete the free concurrency slot rows of ``queue`` (their activity no longer runs under
    the slot's token) last taken at least ``idle_s`` seconds ago, among the next ``page`` rows
    after the key ``after`` (queue's type, partition, slot; ``None``: from the start). A slot in
    use is never deleted, whatever runs beside it (``sql_flow_limits.SWEEP_SLOTS``)."""
    queue = check.queue_name(queue)
    check.integer("idle_s", idle_s, 0, check.MAX_DURATION_SECONDS)
    check.integer("page", page, 1, 100_000)
    after_type, after_partition, after_slot = after or _SLOTS_START
    deleted, examined, *last = db.fetch_row(
        db.alias_for(using),
        sql_flow_limits.SWEEP_SLOTS,
        {
            "queue": queue,
            "after_type": after_type,
            "after_partition": after_partition,
            "after_slot": after_slot,
            "idle_s": idle_s,
            "page": page,
        },
    )
    more = examined >= page and last[0] is not None
    return SweepPage(int(deleted), int(examined), (last[0], last[1], int(last[2])) if more else None)


@db.operation
def sweep_partitions(
    queue: str,
    *,
    after: uuid.UUID | None = None,
    page: int = SWEEP_PAGE,
    using: str | None = None,
) -> SweepPage:
    """Delete the partition keys of ``queue``'s activities that are gone or completed, among the
    next ``page`` rows (of every queue) after the activity id ``after`` (``None``: from the
    start). Failed, dead-lettered and cancelled activities keep theirs: an operator may run them
    again (``sql_flow_limits.SWEEP_PARTITIONS``)."""
    queue = check.queue_name(queue)
    check.integer("page", page, 1, 100_000)
    deleted, examined, last = db.fetch_row(
        db.alias_for(using),
        sql_flow_limits.SWEEP_PARTITIONS,
        {"queue": queue, "after": str(after or _PARTITIONS_START), "page": page},
    )
    more = examined >= page and last is not None
    return SweepPage(int(deleted), int(examined), last if more else None)
