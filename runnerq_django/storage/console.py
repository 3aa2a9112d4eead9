"""The live console's rollups: written by the workers' maintenance loop (``roll_up``, ``prune``)
and read by the admin's charts (``series``, ``types``, ``depth``). Statements in
``storage.sql.console``; the tables are the app's own (``ConsoleMinute``, ``ConsoleDepth``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from runnerq_django.storage import db, reads
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import console as q

# The latency histogram's bucket bounds (ms): the live console's percentiles read its columns.
LATENCY_BOUNDS_MS = q.LATENCY_BOUNDS_MS

# Each rollup recomputes the minutes overlapping the last RECOMPUTE_SECONDS: an activity whose
# transaction committed late (completed_at is its transaction's start) is still counted.
RECOMPUTE_SECONDS = 120
# Queue depth is counted up to this many rows per class (due, scheduled, processing).
DEPTH_CAP = 100_000


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@db.operation
def roll_up(queue: str, *, using: str | None = None) -> int:
    """Recompute the rollups of ``queue`` for the minutes overlapping the last
    ``RECOMPUTE_SECONDS`` (and the ten-minute sums holding them) and sample its depth now, in one
    transaction. Returns the number of (minute, type) rows written."""
    queue = check.queue_name(queue)
    alias = db.alias_for(using)
    with db.atomic(alias):
        since = _minute(reads.database_now(alias) - timedelta(seconds=RECOMPUTE_SECONDS))
        params: dict[str, Any] = {
            "queue": queue,
            "since": since,
            "bounds": list(q.LATENCY_BOUNDS_MS),
            "cap": DEPTH_CAP,
        }
        db.fetch_all(alias, q.CLEAR_MINUTES, params)
        with connections[alias].cursor() as cursor:
            cursor.execute(q.ROLLUP_MINUTES, params)
            written = int(cursor.rowcount)
        db.fetch_all(alias, q.ROLLUP_TENS, params)
        ((first_minute, backfill),) = db.fetch_all(alias, q.FIRST_MINUTES, params)
        params["derived_since"] = min(since, first_minute) if backfill else since
        db.fetch_all(alias, q.ROLLUP_TOTALS, params)
        db.fetch_all(alias, q.ROLLUP_HOURS, params)
        db.fetch_all(alias, q.SAMPLE_DEPTH, params)
    return max(0, written)


@db.operation
def prune(keep_seconds: int, *, using: str | None = None) -> int:
    """Delete rollups and depth samples older than ``keep_seconds``; returns the rows deleted."""
    keep = check.integer("keep_seconds", keep_seconds, 1, check.MAX_DURATION_SECONDS)
    alias = db.alias_for(using)
    deleted = 0
    for statement in (q.PRUNE_MINUTES, q.PRUNE_DEPTH):
        with connections[alias].cursor() as cursor:
            cursor.execute(statement, {"keep": keep})
            deleted += max(0, cursor.rowcount)
    return deleted


def _window(since: datetime, step_seconds: int, queue: str | None) -> dict[str, Any]:
    """The reads' parameters: bins of ten minutes or more read the ten-minute sums."""
    span = 10 if step_seconds % 600 == 0 else 1
    return {"since": since, "step": timedelta(seconds=step_seconds), "queue": queue, "span": span}


def _decoded(rows: list[db.Row]) -> list[db.Row]:
    """The rows with their bucket columns (the last ones) as one dict of bucket -> count."""
    width = len(q.BUCKET_COLUMNS)
    out = []
    for row in rows:
        head, counts = row[:-width], row[-width:]
        out.append((*head, {i: int(n) for i, n in enumerate(counts) if n}))
    return out


def outcomes(
    alias: str, since: datetime, step_seconds: int, queue: str | None = None
) -> tuple[list[db.Row], list[db.Row]]:
    """From ``since``, from the queues' totals, in one statement: per bin of ``step_seconds``
    (bin, completed, failed, dead-lettered, latency count, sum, max, histogram), and per queue
    over the window (queue, the same counts)."""
    rows = _decoded(db.fetch_all(alias, q.OUTCOMES, _window(since, step_seconds, queue)))
    series = [(r[1], *r[3:]) for r in rows if not r[0]]
    per_queue = [(r[2], *r[3:]) for r in rows if r[0]]
    return series, per_queue


def types(
    alias: str, since: datetime, step_seconds: int, queue: str | None, shown: int
) -> tuple[list[db.Row], db.Row | None]:
    """From ``since``: the ``shown`` types with the most failures, then the highest mean latency
    (queue, type, completed, failed, dead-lettered, latency count, sum, max, histogram), and the
    other types folded into one row (the number of types, then the same counts but the
    histogram), or ``None`` when every type is shown."""
    params = _window(since, step_seconds, queue)
    # The window's rows of the next span up (ten minutes, an hour) once its bins start.
    params.update(shown=shown, coarse=10 if params["span"] == 1 else 60)
    with db.atomic(alias):
        # The plan's cost looks like a big query's (hundreds of thousands of rows), so Postgres
        # would JIT-compile it: up to a second, for a statement that runs every few seconds.
        db.fetch_all(alias, "SET LOCAL jit = off")
        rows = _decoded(db.fetch_all(alias, q.TYPES, params))
    top = [(r[1], r[2], *r[4:]) for r in rows if r[0]]
    rest = [(r[3], *r[4:-1]) for r in rows if not r[0]]
    return top, rest[0] if rest else None


def depth(alias: str, since: datetime, step_seconds: int, queue: str | None = None) -> list[db.Row]:
    """Per bin of ``step_seconds`` from ``since``: (bin, due, scheduled, processing)."""
    return db.fetch_all(alias, q.DEPTH_SERIES, _window(since, step_seconds, queue))


def live_claims(alias: str, cap: int = DEPTH_CAP) -> list[db.Row]:
    """The claims held now: (queue, worker id, claims, oldest claim's start), busiest first."""
    return db.fetch_all(alias, q.LIVE_CLAIMS, {"cap": cap})
