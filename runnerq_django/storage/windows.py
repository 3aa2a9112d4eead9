"""Debounce and throttle: enqueues of one key collapsed into one activity, fleet-wide.

A key's window is a row of the app's own table ``runnerq_debounce`` (queue, activity type, kind,
key): the activity it points at, when the group began and when its activity runs, and how many
enqueues it absorbed. Concurrent enqueues of one key serialise on that row, as unique keys do on
the spec's idempotency row (``storage.unique``): the first inserts it (the others wait for its
commit on the primary key), the others lock it and decide in statements of their own, whose
snapshots see what the one before them committed.

- **Debounce** (``submit_debounced``): the first enqueue creates an activity scheduled ``wait``
  from now. Each later one, while that activity is still ``scheduled``, unclaimed and not yet due,
  moves its ``scheduled_at`` to ``wait`` after this enqueue, never past ``max_wait`` after the
  group's first, and replaces its input with this enqueue's payload (the last payload wins). Both
  are the spec's own columns read the spec's way (``scheduled_at`` is when a scheduled activity
  becomes due, for every SDK; the input is read at the claim), and the move never makes it due
  at once, so a claim racing it never reads the input being replaced. Once the activity was
  claimed, finished, deleted or became due, the next enqueue begins a new group.
- **Throttle** (``submit_throttled``): at most one activity per key per window. The first enqueue
  creates an activity (due now) and opens a window of ``window`` from now. An enqueue inside it
  returns that activity (``on_excess="drop"``), or creates one for the next window, due when the
  current one ends (``"defer"``), which later enqueues up to its start return. An enqueue after
  the window opens a new one.

Both return the activity that will run (``SubmitResult.created`` False when it was an existing
one). Nothing here is a column of a spec table: other SDKs see ordinary activities.

Internal: not part of the public API (``runnerq_django.activities.debounce`` is).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections

from runnerq_django.storage import db, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import windows as sql

# The submit module's own steps (its name is shadowed by the submit() operation in the package).
from runnerq_django.storage.submit import _insert, _max_payload_bytes, _row, _validated
from runnerq_django.storage.types import NewActivity, SubmitResult

__all__ = [
    "DEBOUNCE",
    "MAX_WINDOW_MS",
    "ON_EXCESS",
    "THROTTLE",
    "Window",
    "recent_windows",
    "submit_debounced",
    "submit_throttled",
    "sweep_windows",
    "window_counts",
    "window_of",
]

DEBOUNCE = "debounce"
THROTTLE = "throttle"
ON_EXCESS = ("drop", "defer")
MAX_WINDOW_MS = check.MAX_DURATION_SECONDS * 1000


def _checked(queue: str, activity: NewActivity, field: str) -> tuple[str, NewActivity]:
    queue, [item], _ = _validated(queue, [activity], None)
    if item.parent_id is not None:
        raise check.invalid(field, "applies to root activities, not to spawned children")
    if item.idempotency_key is not None or item.raw_idempotency_key is not None:
        raise check.invalid(field, "give either it or idempotency_key (or unique_key), not both")
    if item.delay_seconds:
        raise check.invalid(field, "sets when the activity runs: give it without delay")
    return queue, item


def _window(name: str, value: Any, *, low: int = 1) -> int:
    return int(check.integer(name, value, low, MAX_WINDOW_MS))


def _params(queue: str, item: NewActivity, kind: str, key: str, **more: Any) -> dict[str, Any]:
    return {"queue": queue, "activity_type": item.activity_type, "kind": kind, "key": key, **more}


def _create(alias: str, queue: str, item: NewActivity, delay_ms: float, params: dict[str, Any]) -> None:
    """Insert ``item`` due ``delay_ms`` from now (the same now() as the window row's)."""
    delayed = dataclasses.replace(item, delay_seconds=delay_ms / 1000)
    _insert(alias, queue, [_row(delayed, 0, _max_payload_bytes(), "")], None)


@db.operation
def submit_debounced(
    queue: str,
    activity: NewActivity,
    *,
    key: str,
    wait_ms: int,
    max_wait_ms: int | None = None,
    using: str | None = None,
) -> SubmitResult:
    """Submit ``activity`` (a root, without a key or a delay) debounced by ``key``: it collapses
    into the key's pending activity while there is one (its time moved to ``wait_ms`` from now,
    capped at ``max_wait_ms`` after the group's first enqueue; its input replaced by this
    payload), else it begins a group, due ``wait_ms`` from now. One transaction (joins the
    caller's)."""
    queue, item = _checked(queue, activity, "debounce")
    key = check.text("debounce.key", key, check.MAX_KEY_BYTES)
    wait_ms = _window("debounce.wait", wait_ms)
    if max_wait_ms is not None:
        max_wait_ms = _window("debounce.max_wait", max_wait_ms)
        if max_wait_ms < wait_ms:
            raise check.invalid(
                "debounce.max_wait",
                f"must be at least debounce.wait ({wait_ms} ms), got {max_wait_ms} ms",
            )
    payload = check.json_text("payload", item.payload, _max_payload_bytes())
    alias = db.alias_for(using)
    params = _params(
        queue,
        item,
        DEBOUNCE,
        key,
        id=item.id,
        delay_ms=wait_ms,
        wait_ms=wait_ms,
        max_wait_ms=max_wait_ms,
        payload=payload,
    )
    with db.atomic(alias):
        if db.fetch_one(alias, sql.TAKE_WINDOW, params) is not None:
            _create(alias, queue, item, wait_ms, params)
            return SubmitResult(item.id, True)
        if db.fetch_one(alias, sql.LOCK_WINDOW, params) is None:  # swept meanwhile: take it again
            return _begin_again(alias, queue, item, params, wait_ms)
        moved = db.fetch_one(alias, sql.COLLAPSE, params)
        if moved is not None:
            return SubmitResult(moved[0], False)
        db.fetch_one(alias, sql.REPOINT_WINDOW, params)
        _create(alias, queue, item, wait_ms, params)
        return SubmitResult(item.id, True)


@db.operation
def submit_throttled(
    queue: str,
    activity: NewActivity,
    *,
    key: str,
    window_ms: int,
    on_excess: str = "drop",
    using: str | None = None,
) -> SubmitResult:
    """Submit ``activity`` (a root, without a key or a delay) throttled by ``key``: at most one
    activity per ``window_ms``. Inside the key's window, the window's activity is returned
    (``on_excess="drop"``), or one due when the window ends is created, or returned when an
    earlier enqueue created it (``"defer"``). One transaction (joins the caller's)."""
    queue, item = _checked(queue, activity, "throttle")
    key = check.text("throttle.key", key, check.MAX_KEY_BYTES)
    window_ms = _window("throttle.window", window_ms)
    if on_excess not in ON_EXCESS:
        raise check.invalid("throttle.on_excess", f"must be 'drop' or 'defer', got {on_excess!r}")
    alias = db.alias_for(using)
    params = _params(queue, item, THROTTLE, key, id=item.id, delay_ms=0, wait_ms=window_ms, max_wait_ms=None)
    with db.atomic(alias):
        if db.fetch_one(alias, sql.TAKE_WINDOW, params) is not None:
            _create(alias, queue, item, 0, params)
            return SubmitResult(item.id, True)
        window = db.fetch_one(alias, sql.LOCK_WINDOW, params)
        if window is None:  # swept meanwhile: take it again
            return _begin_again(alias, queue, item, params, 0)
        holder, ahead, over, next_delay_ms = window
        if over:  # the window is past: a new one from now
            db.fetch_one(alias, sql.REPOINT_WINDOW, params)
            _create(alias, queue, item, 0, params)
            return SubmitResult(item.id, True)
        if ahead or on_excess == "drop":  # the window's activity covers this enqueue
            db.fetch_one(alias, sql.COUNT_COLLAPSED, params)
            return SubmitResult(holder, False)
        deferred = {**params, "delay_ms": float(next_delay_ms)}  # defer: the next window's
        db.fetch_one(alias, sql.REPOINT_WINDOW, deferred)
        _create(alias, queue, item, float(next_delay_ms), deferred)
        return SubmitResult(item.id, True)


def _begin_again(
    alias: str, queue: str, item: NewActivity, params: dict[str, Any], delay_ms: float
) -> SubmitResult:
    """The window row was deleted between the take and the lock (retention's sweep): take it."""
    if db.fetch_one(alias, sql.TAKE_WINDOW, params) is None:
        raise errors.Conflict(f"the window of key {params['key']!r} is changing hands; retry")
    _create(alias, queue, item, delay_ms, params)
    return SubmitResult(item.id, True)


@db.operation
def sweep_windows(*, older_than_seconds: int = 86400, batch: int = 1000, using: str | None = None) -> int:
    """Delete windows that ended more than ``older_than_seconds`` ago and whose activity is not
    waiting to run, at most ``batch``; how many."""
    older_than_seconds = int(check.integer("older_than_seconds", older_than_seconds, 0, 10 * 365 * 86400))
    batch = int(check.integer("batch", batch, 1, check.MAX_BATCH))
    alias = db.alias_for(using)
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.SWEEP_WINDOWS, {"older_than_seconds": older_than_seconds, "batch": batch})
        return int(cursor.rowcount)


# Reads (the admin) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One key's window, as the admin shows it."""

    queue_name: str
    activity_type: str
    kind: str
    key: str
    activity_id: uuid.UUID
    first_at: datetime
    last_at: datetime
    run_at: datetime
    wait_ms: int
    max_wait_ms: int | None
    collapsed: int

    @property
    def wait_s(self) -> float:
        return self.wait_ms / 1000

    @property
    def max_wait_s(self) -> float | None:
        return None if self.max_wait_ms is None else self.max_wait_ms / 1000


@db.operation
def window_of(activity_id: uuid.UUID | str, *, using: str | None = None) -> Window | None:
    """The window whose activity ``activity_id`` is, or None."""
    activity_id = check.activity_id("activity_id", activity_id)
    row = db.fetch_one(db.alias_for(using), sql.WINDOW_OF_ACTIVITY, {"id": activity_id})
    return None if row is None else Window(*row)


@db.operation
def recent_windows(*, limit: int = 100, kind: str | None = None, using: str | None = None) -> list[Window]:
    """The ``limit`` windows enqueued to most recently (of ``kind`` only, when given)."""
    limit = int(check.integer("limit", limit, 1, check.MAX_BATCH))
    if kind is not None and kind not in (DEBOUNCE, THROTTLE):
        raise check.invalid("kind", f"must be 'debounce' or 'throttle', got {kind!r}")
    with connections[db.alias_for(using)].cursor() as cursor:
        cursor.execute(sql.RECENT_WINDOWS, {"kind": kind, "limit": limit})
        return [Window(*row) for row in cursor.fetchall()]


@db.operation
def window_counts(*, using: str | None = None) -> dict[str, int]:
    """How many windows there are of each kind."""
    with connections[db.alias_for(using)].cursor() as cursor:
        cursor.execute(sql.WINDOW_COUNTS)
        return {kind: int(count) for kind, count in cursor.fetchall()}
