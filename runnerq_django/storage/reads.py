"""Read operations of the operator console (the admin, ``runnerq_status``, the operator
commands): each runs named statements of ``storage.sql.reads`` on the database ``alias`` and
returns plain rows. They write nothing; the state changes go through ``storage.commands``.

Caps and limits are the caller's (the console's policy); statuses are validated here before
they are spelled as SQL literals.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from runnerq_django.spec import statuses as st
from runnerq_django.storage import db
from runnerq_django.storage.sql import common as sql_common
from runnerq_django.storage.sql import reads as q
from runnerq_django.storage.sql import retention as sql_retention

# The console's count limits (the admin and runnerq_status): each unfinished status is counted up
# to STATUS_COUNT_CAP rows once there are more than GROUPED_COUNT_LIMIT unfinished rows (below
# that, exactly); completed rows are counted exactly only while the table has at most
# GROUPED_COUNT_LIMIT rows.
STATUS_COUNT_CAP = 50_000
GROUPED_COUNT_LIMIT = 250_000

# The admin's column expressions (``admin_views.safe``, the worker pools' page): fragments of its
# querysets' SQL, built by the catalogue so that no module outside storage holds SQL.
ID_CHARS = q.ID_CHARS
plain_json = q.plain_json
pretty_json = q.pretty_json
finite_time = q.finite_time
cut_text = q.cut_text
pool_types = q.pool_types


def database_now(alias: str) -> datetime:
    """The database clock's ``now()``."""
    now: datetime = db.fetch_row(alias, sql_common.DB_NOW)[0]
    return now


@dataclass(frozen=True)
class ReplicaState:
    """What a read replica's own clock and replay say about how stale its answers are."""

    alias: str
    standby: bool  # False: the alias is no standby (promoted, or the primary itself): reads are current
    lag_seconds: float | None  # 0.0 caught up with what it received; None when no transaction was replayed
    paused: bool  # replay paused (pg_wal_replay_pause()): the lag grows until it is resumed
    last_replay_at: datetime | None  # commit time of the last transaction replayed

    def as_json(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "standby": self.standby,
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
            "paused": self.paused,
            "last_replay_at": self.last_replay_at.isoformat() if self.last_replay_at else None,
        }


def replica_state(alias: str) -> ReplicaState:
    """How far the server of ``alias`` is behind its primary (its replay lag, measured on it)."""
    standby, lag, paused, last = db.fetch_row(alias, q.REPLICA_STATE)
    return ReplicaState(alias, bool(standby), None if lag is None else float(lag), bool(paused), last)


def literal_status(status: str) -> str:
    """A stored status as an SQL literal (validated against the spec's list, so safe to inline)."""
    if status not in st.STORED_STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return f"'{status}'"


def queues_with_work(alias: str, limit: int) -> set[str]:
    """The first ``limit`` queues of each index that leads with ``queue_name`` (skip scans of
    runnable, running and finished-root work), and of the worker pools."""
    found: set[str] = set()
    for where in (q.QUEUES_RUNNABLE, q.QUEUES_PROCESSING, q.QUEUES_FINISHED_ROOTS):
        found.update(r[0] for r in db.fetch_all(alias, q.loose_scan("queue_name", where, limit)))
    found.update(r[0] for r in db.fetch_all(alias, q.POOL_QUEUES, [limit]))
    return found


def runnable_types(alias: str, queues: list[str] | None, limit: int) -> set[str]:
    """The types of runnable work, at most ``limit`` (queue, type) pairs, within ``queues`` if given."""
    statement = q.runnable_types(queues is not None, limit)
    return {r[0] for r in db.fetch_all(alias, statement, {"queues": list(queues or [])})}


def due_by_type(
    alias: str, queues: list[str], alive_seconds: float, cap: int, limit: int
) -> dict[str, dict[str, tuple[int, bool]]]:
    """Per queue of ``queues``, the types with work due now: how much (each counted up to
    ``cap``; at most ``limit`` (queue, type) pairs looked at), and whether a live worker on the
    queue (seen in the last ``alive_seconds``) handles the type."""
    found: dict[str, dict[str, tuple[int, bool]]] = {}
    with db.atomic(alias):
        db.fetch_all(alias, q.INDEX_WALKS_ONLY)
        rows = db.fetch_all(
            alias,
            q.due_by_type(limit),
            {"queues": list(queues), "cap": int(cap), "alive": float(alive_seconds)},
        )
    for queue, kind, due, handled in rows:
        found.setdefault(queue, {})[kind] = (int(due), bool(handled))
    return found


def ids_for_keys(alias: str, queues: list[str], keys: list[str]) -> list[uuid.UUID]:
    """Activities holding one of the idempotency ``keys`` in one of ``queues``."""
    return [r[0] for r in db.fetch_all(alias, q.IDS_FOR_KEYS, [queues, keys])]


def unfinished_counts(
    alias: str, cap: int, grouped_limit: int
) -> tuple[dict[tuple[str, str], int], set[str]]:
    """Per (queue, status) counts of every non-completed status, from ``idx_runnerq_query_status``.
    Exact while there are at most ``grouped_limit`` unfinished rows; beyond that each status is
    capped at ``cap`` rows. Returns the counts and the statuses that hit the cap."""
    unfinished = db.fetch_row(alias, q.unfinished_probe(grouped_limit + 1))[0]
    counts: dict[tuple[str, str], int] = {}
    if unfinished <= grouped_limit:
        for queue, status, n in db.fetch_all(alias, q.UNFINISHED_COUNTS):
            counts[(queue, status)] = n
        return counts, set()
    statuses = [literal_status(s) for s in st.STORED_STATUSES if s != st.COMPLETED]
    totals: dict[str, int] = {}
    for status, queue, n in db.fetch_all(alias, q.capped_status_counts(statuses, cap)):
        counts[(queue, status)] = n
        totals[status] = totals.get(status, 0) + n
    return counts, {status for status, n in totals.items() if n > cap}


def activities_up_to(alias: str, limit: int) -> int:
    """How many activities there are, counting no further than ``limit``."""
    return int(db.fetch_row(alias, q.rows_probe(limit))[0])


def completed_counts(alias: str, queues: list[str]) -> dict[str, int]:
    """Completed activities per queue, exactly (reads the table)."""
    return dict(db.fetch_all(alias, q.COMPLETED_COUNTS, [queues]))


def estimated_rows(queryset: QuerySet[Any]) -> int:
    """The planner's row estimate for a queryset (``EXPLAIN``; nothing is executed)."""
    statement, params = queryset.order_by().query.sql_with_params()
    plan = db.fetch_row(queryset.db, q.EXPLAIN_JSON + statement, params)[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def oldest_runnable(alias: str, queues: list[str]) -> dict[str, tuple[datetime | None, str | None]]:
    """Per queue, the oldest due runnable activity's ``COALESCE(scheduled_at, created_at)``
    (finite, or ``None`` and its text), exactly."""
    found: dict[str, tuple[datetime | None, str | None]] = {queue: (None, None) for queue in queues}
    rows = db.fetch_all(alias, q.OLDEST_RUNNABLE, {"queues": list(queues)})
    found.update({name: (value, raw) for name, value, raw in rows})
    return found


def queue_depth(alias: str, queues: list[str], cap: int) -> dict[str, dict[str, int]]:
    """Per queue, the counts ``due``, ``scheduled``, ``waiting`` and ``running`` (each capped at
    ``cap``)."""
    rows = db.fetch_all(alias, q.QUEUE_DEPTH, {"queues": list(queues), "cap": int(cap)})
    return {
        name: {"due": due, "scheduled": scheduled, "waiting": waiting, "running": running}
        for name, due, scheduled, waiting, running in rows
    }


def finished_in_windows(
    alias: str, queues: list[str], lookback: str, cap: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Rows (queue, status, last 5 minutes, last 60 minutes) of finished roots, and of finished
    children created in the last ``lookback`` (each with the rows read, capped at ``cap`` + 1)."""
    statuses = [literal_status(s) for s in ("completed", "failed", "dead_letter")]
    roots = db.fetch_all(alias, q.finished_roots_in_windows(statuses), {"queues": queues})
    return roots, db.fetch_all(alias, q.finished_children_in_windows(lookback, cap))


def worker_pools(alias: str, alive_seconds: float, activity_type: str | None = None) -> list[tuple[Any, ...]]:
    """Pool rows seen in the last hour: id, queue, max workers, the first types (cut), started,
    last seen, alive, the number of types, and whether it serves ``activity_type``."""
    return db.fetch_all(alias, q.WORKER_POOLS, {"alive": alive_seconds, "type": activity_type})


def recent_commands(alias: str, limit: int) -> list[tuple[Any, ...]]:
    """The newest ledger rows: queue, command id, kind, created, matched, applied, cascaded."""
    return db.fetch_all(alias, q.RECENT_COMMANDS, [limit])


def first_event_id_since(alias: str, since: datetime) -> int | None:
    """The first event id created at or after ``since``, by bisecting the id sequence (about 20
    primary-key probes): ids grow with time, so an id bound turns a time filter into a range
    of the primary key instead of a scan of the whole table."""
    lo: int | None
    hi: int
    lo, hi = db.fetch_row(alias, q.EVENT_ID_RANGE)
    if lo is None:
        return None
    with connections[alias].cursor() as cur:

        def created_at(at_least: int) -> tuple[int, datetime] | None:
            cur.execute(q.EVENT_FROM_ID, [at_least])
            found: tuple[int, datetime] | None = cur.fetchone()
            return found

        last = created_at(hi)
        if last is None or last[1] < since:
            return hi + 1
        while lo < hi:
            mid = (lo + hi) // 2
            found = created_at(mid)
            if found is None or found[1] >= since:
                hi = mid
            else:
                lo = found[0] + 1 if found[0] > mid else mid + 1
    # Transactions commit out of order, so back off a little: the created_at filter stays exact.
    return max(lo - 1000, 0)


def expired_leases(alias: str, queue: str) -> int:
    """How many of a queue's running activities hold an expired lease (what a reap would take)."""
    return int(db.fetch_row(alias, q.EXPIRED_LEASES, [queue])[0])


def finished_to_retry(
    alias: str, queue: str, statuses: list[str], activity_type: str | None, limit: int
) -> list[uuid.UUID]:
    """Ids of a queue's activities in ``statuses`` (of ``activity_type`` if given), oldest first."""
    for status in statuses:
        literal_status(status)
    statement = q.finished_to_retry(sorted(set(statuses)), activity_type is not None)
    return [
        r[0] for r in db.fetch_all(alias, statement, {"queue": queue, "type": activity_type, "limit": limit})
    ]


def roots_past_window(alias: str, queue: str, windows: dict[str, int]) -> int:
    """How many finished roots of a queue are past their retention window (``completed_s``,
    ``failed_s``; 0 turns a class off), the kept ones included: what a cleanup may delete."""
    on = {
        window: seconds
        for window, seconds in windows.items()
        if seconds and window in ("completed_s", "failed_s")
    }
    if not on:
        return 0
    return int(db.fetch_row(alias, sql_retention.count_past_window(list(on)), {"queue": queue, **on})[0])


def enqueued_at(alias: str, activity_id: uuid.UUID) -> datetime | None:
    """When an activity was enqueued (its ``created_at``); None when there is no such activity."""
    row = db.fetch_one(alias, q.TASK_ENQUEUED_AT, {"id": activity_id})
    return None if row is None else row[0]


def task_result(alias: str, activity_id: uuid.UUID) -> db.Row | None:
    """A django task's state in one row (the tasks backend's ``get_result``): its activity, input,
    result and the events of its failed attempts; None for an unknown id or another kind of
    activity."""
    return db.fetch_one(alias, q.TASK_RESULT, {"id": activity_id})
