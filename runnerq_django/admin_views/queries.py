"""The admin's reads, written for a table of millions of activities: the statements and the
operations that run them are the storage layer's (``storage.reads``, ``storage.sql.reads``);
this module adds the console's policy -- which queues and types are shown, the caps (counts that
could grow without bound are capped: an exact number below the cap, "cap+" above it, or
estimated from the planner) -- and the overview's shape. These are reads only: the state changes
the admin makes go through ``runnerq_django.storage.commands``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runnerq_django import conf
from runnerq_django.admin_views import database, guard
from runnerq_django.spec import statuses as st
from runnerq_django.storage import horizon as horizons
from runnerq_django.storage import reads
from runnerq_django.storage.reads import estimated_rows as estimated_rows  # the admin's names
from runnerq_django.storage.reads import literal_status as literal_status

# Counts above STATUS_COUNT_CAP are shown as "N+" (the overview) or estimated (list pagination);
# up to GROUPED_COUNT_LIMIT unfinished rows are counted exactly. runnerq_status shares them.
STATUS_COUNT_CAP = reads.STATUS_COUNT_CAP
GROUPED_COUNT_LIMIT = reads.GROUPED_COUNT_LIMIT
WINDOW_SCAN_CAP = 50_000
CHILD_LOOKBACK = "2 hours"
# With thousands of queues the admin shows a bounded number of them: the filter lists the first
# QUEUE_SCAN_LIMIT queues of each index, the overview the OVERVIEW_QUEUES busiest (configured first).
QUEUE_SCAN_LIMIT = 200
TYPE_SCAN_LIMIT = 500
OVERVIEW_QUEUES = 50

NOT_COMPLETED = tuple(s for s in st.STORED_STATUSES if s != st.COMPLETED)


def _alias() -> str:
    return guard.read_alias()


def replica_state() -> reads.ReplicaState | None:
    """The replay lag of the replica this request reads, or None when it reads the primary."""
    alias = _alias()
    # The page's database itself (RUNNERQ['DATABASE'], or another when queues live on several).
    return None if alias == database.current() else reads.replica_state(alias)


def horizon() -> horizons.Horizon:
    """The xmin horizon of the page's database, read on it (not on its replica: a replica's own
    horizon is not what holds back the primary's vacuum)."""
    return horizons.horizon(database.current(), held_seconds=float(conf.get("HORIZON_HELD_SECONDS")))


# -- queues and types ---------------------------------------------------------------------------


def known_queues(limit: int = 1000) -> list[str]:
    """Queues worth showing: configured ones, and the first ``limit`` of each index that leads with
    ``queue_name`` (skip scans of runnable, running and finished-root work, and of worker pools)."""
    found = set(conf.get("QUEUES") or [])
    found.add(conf.get("DEFAULT_QUEUE"))
    found.update(reads.queues_with_work(_alias(), limit))
    return sorted(q for q in found if q)


def known_types(queues: list[str] | None = None) -> list[str]:
    """Activity types: the registered handlers, plus the types of runnable work (a skip scan of
    ``idx_runnerq_dequeue_effective_v2`` from one (queue, type) pair to the next, at most
    ``TYPE_SCAN_LIMIT`` pairs in all however many queues there are), within ``queues`` if given."""
    found: set[str] = set()
    try:
        from runnerq_django.activities.registry import registry

        found.update(registry.names())
    except Exception:  # the registry is optional for the admin
        pass
    found.update(reads.runnable_types(_alias(), queues, TYPE_SCAN_LIMIT))
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
    return reads.ids_for_keys(_alias(), queues, sorted(keys))


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
    return reads.unfinished_counts(_alias(), cap, GROUPED_COUNT_LIMIT)


def oldest_runnable(queue: str) -> datetime | None:
    """The oldest due runnable activity's ``COALESCE(scheduled_at, created_at)`` (``None`` when an
    infinite timestamp is the oldest; ``oldest_runnable_many`` gives its text)."""
    return oldest_runnable_many([queue])[queue][0]


def oldest_runnable_many(queues: list[str]) -> dict[str, tuple[datetime | None, str | None]]:
    """Per queue, the oldest due runnable activity's ``COALESCE(scheduled_at, created_at)``
    (finite, or ``None`` and its text), exactly, in a handful of probes per queue and one
    statement: the dequeue index is ordered (priority, retry_count, time) within the queue, so
    the first entry of each (priority, retry_count) group is that group's oldest."""
    return reads.oldest_runnable(_alias(), queues)


def finished_in_windows(queues: list[str]) -> tuple[dict[str, dict[str, int]], bool]:
    """Completions and failures (``failed`` + ``dead_letter``) per queue over the last 5 and 60
    minutes. Roots are counted exactly from ``idx_runnerq_root_terminal`` (queue, status,
    completed_at); children from the activities created in the last ``CHILD_LOOKBACK``
    (``idx_runnerq_query_created``, capped at ``WINDOW_SCAN_CAP`` rows): children finish soon
    after their parent spawns them, and one created longer ago than that is not counted."""
    out = {q: {"completed_5m": 0, "completed_60m": 0, "failed_5m": 0, "failed_60m": 0} for q in queues}
    if not queues:
        return out, False
    rows, children = reads.finished_in_windows(_alias(), queues, CHILD_LOOKBACK, WINDOW_SCAN_CAP)
    capped = any(r[4] > WINDOW_SCAN_CAP for r in children)
    for queue, status, n5, n60, *_ in [*rows, *children]:
        if queue not in out:
            continue
        prefix = "completed" if status == "completed" else "failed"
        out[queue][f"{prefix}_5m"] += n5
        out[queue][f"{prefix}_60m"] += n60
    return out, capped


def worker_pools(alive_seconds: float, activity_type: str | None = None) -> list[dict[str, Any]]:
    """Pool rows seen in the last hour (older ones are dead and pruned by workers): their first
    ``activity_types`` (cut), ``type_count`` in all, and whether each ``serves`` ``activity_type``."""
    rows = reads.worker_pools(_alias(), alive_seconds, activity_type)
    keys = (
        "pool_id",
        "queue_name",
        "max_workers",
        "activity_types",
        "started_at",
        "last_seen_at",
        "alive",
        "type_count",
        "serves",
    )
    return [dict(zip(keys, r)) for r in rows]


def recent_commands(limit: int = 10) -> list[dict[str, Any]]:
    # Numbers as short texts and a finite time: a ledger row another SDK wrote cannot break the page.
    rows = reads.recent_commands(_alias(), limit)
    return [
        {
            "queue_name": queue,
            "command_id": command_id,
            "kind": kind,
            "created_at": created_at,
            "matched": _count(matched),
            "applied": _count(applied),
            "cascaded": _count(cascaded),
        }
        for queue, command_id, kind, created_at, matched, applied, cascaded in rows
    ]


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
    return {
        "queues": shown,
        "hidden_queues": len(ranked) - len(shown),
        "alive_seconds": alive_seconds,
        "status_cap": STATUS_COUNT_CAP,
        "commands": recent_commands(),
        "statuses": NOT_COMPLETED,
        "replica": replica_state(),
        "horizon": horizon(),
    }


# -- events ------------------------------------------------------------------------------------


def first_event_id_since(since: datetime) -> int | None:
    """The first event id created at or after ``since``, by bisecting the id sequence (about 20
    primary-key probes): ids grow with time, so an id bound turns a time filter into a range
    of the primary key instead of a scan of the whole table."""
    return reads.first_event_id_since(_alias(), since)


def since_delta(code: str) -> timedelta | None:
    return {
        "5m": timedelta(minutes=5),
        "1h": timedelta(hours=1),
        "24h": timedelta(hours=24),
        "7d": timedelta(days=7),
    }.get(code)
