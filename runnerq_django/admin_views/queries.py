"""The admin's read queries, written for a table of millions of activities.

Rules they follow (SPEC.md (a) "HOT / fillfactor"): statuses are spelled as SQL literals so the
planner can prove a partial index's predicate; no query counts a whole table; lists walk an index
in its order and stop at a LIMIT; counts that could grow without bound are capped (an exact
number below the cap, "cap+" above it) or estimated from the planner. These are reads only: the
state changes the admin makes go through ``runnerq_django.storage.commands``.
"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from runnerq_django import conf
from runnerq_django.spec import statuses as st

# Counts above this are shown as "N+" (the overview) or estimated (list pagination).
STATUS_COUNT_CAP = 50_000
GROUPED_COUNT_LIMIT = 250_000
WINDOW_SCAN_CAP = 50_000
CHILD_LOOKBACK = "2 hours"
# With thousands of queues the admin shows a bounded number of them: the filter lists the first
# QUEUE_SCAN_LIMIT queues of each index, the overview the OVERVIEW_QUEUES busiest (configured first).
QUEUE_SCAN_LIMIT = 200
TYPE_SCAN_LIMIT = 500
OVERVIEW_QUEUES = 50

RUNNABLE_SQL = "('pending', 'scheduled', 'retrying', 'waiting')"
TERMINAL_SQL = "('completed', 'failed', 'dead_letter', 'cancelled')"
NOT_COMPLETED = tuple(s for s in st.STORED_STATUSES if s != st.COMPLETED)


_database: ContextVar[str | None] = ContextVar("runnerq_queries_database", default=None)


def _alias() -> str:
    return _database.get() or conf.database_alias()


@contextmanager
def on_database(alias: str):
    """Run these queries on ``alias`` instead of ``RUNNERQ['DATABASE']`` (``runnerq_status --database``)."""
    token = _database.set(alias)
    try:
        yield
    finally:
        _database.reset(token)


def _rows(sql: str, params: Any = None) -> list[tuple]:
    with connections[_alias()].cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def literal_status(status: str) -> str:
    """A stored status as an SQL literal (validated against the spec's list, so safe to inline)."""
    if status not in st.STORED_STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return f"'{status}'"


# -- queues and types ---------------------------------------------------------------------------


def _loose_scan(column: str, where: str, extra_params: list | None = None, limit: int = 1000) -> list[str]:
    """Distinct values of an index's leading ``column`` by skipping from one value to the next
    (one index probe per value) instead of reading every entry."""
    sql = f"""
        WITH RECURSIVE v(x) AS (
            (SELECT {column} FROM runnerq_activities WHERE {where} ORDER BY {column} LIMIT 1)
            UNION ALL
            SELECT (SELECT a.{column} FROM runnerq_activities a WHERE {where}
                       AND a.{column} > v.x ORDER BY a.{column} LIMIT 1)
              FROM v WHERE v.x IS NOT NULL
        )
        SELECT x FROM v WHERE x IS NOT NULL LIMIT {int(limit)}
    """
    return [r[0] for r in _rows(sql, extra_params)]


def known_queues(limit: int = 1000) -> list[str]:
    """Queues worth showing: configured ones, and the first ``limit`` of each index that leads with
    ``queue_name`` (skip scans of runnable, running and finished-root work, and of worker pools)."""
    found = set(conf.get("QUEUES") or [])
    found.add(conf.get("DEFAULT_QUEUE"))
    found.update(_loose_scan("queue_name", f"status IN {RUNNABLE_SQL}", limit=limit))
    found.update(_loose_scan("queue_name", "status = 'processing'", limit=limit))
    found.update(_loose_scan("queue_name", f"parent_activity_id IS NULL AND status IN {TERMINAL_SQL}", limit=limit))
    found.update(r[0] for r in _rows("SELECT DISTINCT queue_name FROM runnerq_worker_pools LIMIT %s", [limit]))
    return sorted(q for q in found if q)


def known_types(queues: list[str] | None = None) -> list[str]:
    """Activity types: the registered handlers, plus the types of runnable work (a skip scan of
    ``idx_runnerq_dequeue_effective_v2`` from one (queue, type) pair to the next, at most
    ``TYPE_SCAN_LIMIT`` pairs in all however many queues there are), within ``queues`` if given."""
    found: set[str] = set()
    try:
        from runnerq_django.registry import registry

        found.update(registry.names())
    except Exception:  # the registry is optional for the admin
        pass
    within = "AND a.queue_name = ANY(%(queues)s)" if queues is not None else ""
    sql = f"""
        WITH RECURSIVE v(q, t) AS (
            (SELECT a.queue_name, a.activity_type FROM runnerq_activities a
              WHERE a.status IN {RUNNABLE_SQL} {within} ORDER BY a.queue_name, a.activity_type LIMIT 1)
            UNION ALL
            SELECT n.queue_name, n.activity_type FROM v, LATERAL (
                SELECT a.queue_name, a.activity_type FROM runnerq_activities a
                 WHERE a.status IN {RUNNABLE_SQL} {within} AND (a.queue_name, a.activity_type) > (v.q, v.t)
                 ORDER BY a.queue_name, a.activity_type LIMIT 1) n
        )
        SELECT DISTINCT t FROM (SELECT t FROM v LIMIT {TYPE_SCAN_LIMIT}) s
    """
    found.update(r[0] for r in _rows(sql, {"queues": list(queues or [])}))
    return sorted(found)


def ids_for_key(term: str, queues: list[str], types: list[str]) -> list[uuid.UUID]:
    """Activities holding idempotency key ``term``: as stored (``rq:key:...``, ``rq:step:...``)
    or as an application key of one of ``types`` (``BusinessKey(term, type)``). Primary-key
    probes of ``runnerq_idempotency``."""
    from runnerq_django.spec.keys import business_key

    keys = {term}
    for activity_type in types:
        try:
            keys.add(business_key(term, activity_type))
        except ValueError:
            continue
    if not queues:
        return []
    rows = _rows(
        "SELECT activity_id FROM runnerq_idempotency WHERE queue_name = ANY(%s) AND idempotency_key = ANY(%s) LIMIT 1000",
        [queues, sorted(keys)],
    )
    return [r[0] for r in rows]


# -- the overview ------------------------------------------------------------------------------


@dataclass
class QueueSummary:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    capped: set[str] = field(default_factory=set)
    oldest_runnable: datetime | None = None
    oldest_runnable_raw: str | None = None  # the stored text when it is infinite
    completed_5m: int = 0
    completed_60m: int = 0
    failed_5m: int = 0
    failed_60m: int = 0
    window_capped: bool = False
    pools: list[dict[str, Any]] = field(default_factory=list)

    @property
    def live_pools(self) -> list[dict[str, Any]]:
        return [p for p in self.pools if p["alive"]]

    @property
    def capacity(self) -> int:
        return sum(p["max_workers"] for p in self.live_pools)

    @property
    def last_heartbeat(self) -> datetime | None:
        return max((p["last_seen_at"] for p in self.pools if p["last_seen_at"] is not None), default=None)

    @property
    def unfinished(self) -> int:
        return sum(self.counts.values())

    def count(self, status: str) -> str:
        value = self.counts.get(status, 0)
        return f"{value:,}+" if status in self.capped else f"{value:,}"


def status_counts(cap: int = STATUS_COUNT_CAP) -> tuple[dict[tuple[str, str], int], set[str]]:
    """Per (queue, status) counts of every non-completed status, from ``idx_runnerq_query_status``
    (completed rows have no entry there, so the work is proportional to the unfinished rows).

    When there are at most ``GROUPED_COUNT_LIMIT`` unfinished rows (an index-only probe tells),
    one grouped scan counts them all exactly. Beyond that each status is read from its own range
    of the index and capped at ``cap`` rows, so a backlog of millions costs the same as one of
    ``cap``; returns the counts and the statuses that hit the cap."""
    unfinished = _rows(f"SELECT count(*) FROM (SELECT 1 FROM runnerq_activities WHERE status <> 'completed'"
                       f" LIMIT {GROUPED_COUNT_LIMIT + 1}) s")[0][0]
    counts: dict[tuple[str, str], int] = {}
    if unfinished <= GROUPED_COUNT_LIMIT:
        for queue, status, n in _rows("SELECT queue_name, status, count(*) FROM runnerq_activities"
                                      " WHERE status <> 'completed' GROUP BY 1, 2"):
            counts[(queue, status)] = n
        return counts, set()
    parts = []
    for status in NOT_COMPLETED:
        parts.append(
            f"SELECT {literal_status(status)} AS status, queue_name, count(*) FROM"
            f" (SELECT queue_name FROM runnerq_activities WHERE status = {literal_status(status)} LIMIT {cap + 1}) s"
            f" GROUP BY queue_name"
        )
    totals: dict[str, int] = {}
    for status, queue, n in _rows(" UNION ALL ".join(parts)):
        counts[(queue, status)] = n
        totals[status] = totals.get(status, 0) + n
    capped = {status for status, n in totals.items() if n > cap}
    return counts, capped


def oldest_runnable(queue: str) -> datetime | None:
    """The oldest due runnable activity's ``COALESCE(scheduled_at, created_at)`` (``None`` when an
    infinite timestamp is the oldest; ``oldest_runnable_many`` gives its text)."""
    return oldest_runnable_many([queue])[queue][0]


def oldest_runnable_many(queues: list[str]) -> dict[str, tuple[datetime | None, str | None]]:
    """Per queue, the oldest due runnable activity's ``COALESCE(scheduled_at, created_at)``
    (finite, or ``None`` and its text), exactly, in a handful of probes per queue and one
    statement: the dequeue index is ordered (priority, retry_count, time) within the queue, so
    the first entry of each (priority, retry_count) group is that group's oldest."""
    sql = f"""
        SELECT q.name, CASE WHEN isfinite(m.t) THEN m.t END, CASE WHEN NOT isfinite(m.t) THEN m.t::text END
          FROM unnest(%(queues)s::text[]) AS q(name), LATERAL (
        WITH RECURSIVE g(priority, retry_count) AS (
            (SELECT priority, retry_count FROM runnerq_activities
              WHERE queue_name = q.name AND status IN {RUNNABLE_SQL}
              ORDER BY priority DESC, retry_count DESC LIMIT 1)
            UNION ALL
            SELECT n.priority, n.retry_count FROM g, LATERAL (
                SELECT a.priority, a.retry_count FROM runnerq_activities a
                 WHERE a.queue_name = q.name AND a.status IN {RUNNABLE_SQL}
                   AND (a.priority, a.retry_count) < (g.priority, g.retry_count)
                 ORDER BY a.priority DESC, a.retry_count DESC LIMIT 1) n
        )
        SELECT min(o.t) AS t FROM g, LATERAL (
            SELECT COALESCE(a.scheduled_at, a.created_at) AS t FROM runnerq_activities a
             WHERE a.queue_name = q.name AND a.status IN {RUNNABLE_SQL}
               AND a.priority = g.priority AND a.retry_count = g.retry_count
             ORDER BY COALESCE(a.scheduled_at, a.created_at) LIMIT 1) o
         WHERE o.t <= now()) m
    """
    found = {queue: (None, None) for queue in queues}
    found.update({name: (value, raw) for name, value, raw in _rows(sql, {"queues": list(queues)})})
    return found


def finished_in_windows(queues: list[str]) -> tuple[dict[str, dict[str, int]], bool]:
    """Completions and failures (``failed`` + ``dead_letter``) per queue over the last 5 and 60
    minutes. Roots are counted exactly from ``idx_runnerq_root_terminal`` (queue, status,
    completed_at); children from the activities created in the last ``CHILD_LOOKBACK``
    (``idx_runnerq_query_created``, capped at ``WINDOW_SCAN_CAP`` rows): children finish soon
    after their parent spawns them, and one created longer ago than that is not counted."""
    out = {q: {"completed_5m": 0, "completed_60m": 0, "failed_5m": 0, "failed_60m": 0} for q in queues}
    if not queues:
        return out, False
    parts = []
    for status in ("completed", "failed", "dead_letter"):
        parts.append(f"""
            SELECT q.name, {literal_status(status)},
                   (SELECT count(*) FROM runnerq_activities a
                     WHERE a.queue_name = q.name AND a.status = {literal_status(status)} AND a.parent_activity_id IS NULL
                       AND a.completed_at >= now() - interval '5 minutes'),
                   (SELECT count(*) FROM runnerq_activities a
                     WHERE a.queue_name = q.name AND a.status = {literal_status(status)} AND a.parent_activity_id IS NULL
                       AND a.completed_at >= now() - interval '60 minutes')
              FROM unnest(%(queues)s::text[]) AS q(name)""")
    rows = _rows(" UNION ALL ".join(parts), {"queues": queues})
    children = _rows(
        f"""
        WITH recent AS (
            SELECT queue_name, status, completed_at, parent_activity_id FROM runnerq_activities
             WHERE created_at >= now() - interval '{CHILD_LOOKBACK}'
             ORDER BY created_at DESC, id DESC LIMIT {WINDOW_SCAN_CAP + 1})
        SELECT queue_name, status,
               count(*) FILTER (WHERE completed_at >= now() - interval '5 minutes'),
               count(*), (SELECT count(*) FROM recent)
          FROM recent
         WHERE parent_activity_id IS NOT NULL AND status IN ('completed', 'failed', 'dead_letter')
           AND completed_at >= now() - interval '60 minutes'
         GROUP BY queue_name, status
        """
    )
    capped = any(r[4] > WINDOW_SCAN_CAP for r in children)
    for queue, status, n5, n60, *_ in [*rows, *children]:
        if queue not in out:
            continue
        prefix = "completed" if status == "completed" else "failed"
        out[queue][f"{prefix}_5m"] += n5
        out[queue][f"{prefix}_60m"] += n60
    return out, capped


def worker_pools(alive_seconds: float) -> list[dict[str, Any]]:
    """Pool rows seen in the last hour (older ones are dead and pruned by workers)."""
    rows = _rows(
        "SELECT pool_id, queue_name, max_workers, activity_types,"
        " CASE WHEN isfinite(started_at) THEN started_at END, CASE WHEN isfinite(last_seen_at) THEN last_seen_at END,"
        " last_seen_at >= now() - make_interval(secs => %s) AS alive"
        " FROM runnerq_worker_pools WHERE last_seen_at >= now() - interval '1 hour'"
        " ORDER BY queue_name, last_seen_at DESC LIMIT 500",
        [alive_seconds],
    )
    keys = ("pool_id", "queue_name", "max_workers", "activity_types", "started_at", "last_seen_at", "alive")
    return [dict(zip(keys, r)) for r in rows]


def recent_commands(limit: int = 10) -> list[dict[str, Any]]:
    # Numbers as short texts and a finite time: a ledger row another SDK wrote cannot break the page.
    rows = _rows(
        "SELECT queue_name, command_id, kind, CASE WHEN isfinite(created_at) THEN created_at END,"
        " left(result ->> 'matched', 20), left(result ->> 'applied', 20), left(result ->> 'cascaded', 20)"
        " FROM runnerq_commands ORDER BY created_at DESC LIMIT %s",
        [limit],
    )
    return [{"queue_name": queue, "command_id": command_id, "kind": kind, "created_at": created_at,
             "matched": _count(matched), "applied": _count(applied), "cascaded": _count(cascaded)}
            for queue, command_id, kind, created_at, matched, applied, cascaded in rows]


def _count(text: str | None) -> int | str:
    return int(text) if text and text.isdigit() else (text or 0)


def overview() -> dict[str, Any]:
    heartbeat = float(conf.get("HEARTBEAT_SECONDS") or 10)
    alive_seconds = max(30.0, 3 * heartbeat)
    counts, capped = status_counts()
    configured = set(conf.get("QUEUES") or []) | {conf.get("DEFAULT_QUEUE")}
    summaries = {}
    for name in set(known_queues(QUEUE_SCAN_LIMIT)) | {q for q, _ in counts}:
        summary = summaries[name] = QueueSummary(name=name, capped=capped)
        summary.counts = {status: counts.get((name, status), 0) for status in NOT_COMPLETED}
    # Configured queues first, then the ones with the most unfinished work: at most OVERVIEW_QUEUES.
    ranked = sorted(summaries.values(), key=lambda s: (s.name not in configured, -s.unfinished, s.name))
    shown = sorted(ranked[:OVERVIEW_QUEUES], key=lambda s: s.name)
    names = [s.name for s in shown]
    windows, window_capped = finished_in_windows(names)
    oldest = oldest_runnable_many(names)
    pools = worker_pools(alive_seconds)
    for summary in shown:
        summary.window_capped = window_capped
        summary.oldest_runnable, summary.oldest_runnable_raw = oldest[summary.name]
        for key, value in windows[summary.name].items():
            setattr(summary, key, value)
        summary.pools = [p for p in pools if p["queue_name"] == summary.name]
    return {"queues": shown, "hidden_queues": len(ranked) - len(shown), "alive_seconds": alive_seconds,
            "status_cap": STATUS_COUNT_CAP, "commands": recent_commands(), "statuses": NOT_COMPLETED}


# -- events ------------------------------------------------------------------------------------


def first_event_id_since(since: datetime) -> int | None:
    """The first event id created at or after ``since``, by bisecting the id sequence (about 20
    primary-key probes): ids grow with time, so an id bound turns a time filter into a range
    of the primary key instead of a scan of the whole table."""
    lo_hi = _rows("SELECT min(id), max(id) FROM runnerq_events")[0]
    if lo_hi[0] is None:
        return None
    lo, hi = lo_hi
    with connections[_alias()].cursor() as cur:
        def created_at(at_least: int) -> tuple[int, datetime] | None:
            cur.execute("SELECT id, created_at FROM runnerq_events WHERE id >= %s ORDER BY id LIMIT 1", [at_least])
            return cur.fetchone()

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


def since_delta(code: str) -> timedelta | None:
    return {"5m": timedelta(minutes=5), "1h": timedelta(hours=1), "24h": timedelta(hours=24),
            "7d": timedelta(days=7)}.get(code)


# -- estimates ---------------------------------------------------------------------------------


def estimated_rows(queryset) -> int:
    """The planner's row estimate for a queryset (``EXPLAIN``; nothing is executed)."""
    sql, params = queryset.order_by().query.sql_with_params()
    with connections[queryset.db].cursor() as cur:
        cur.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
