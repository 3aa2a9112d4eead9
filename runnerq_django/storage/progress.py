"""Progress and published events of a running activity (``ctx.progress()``, ``ctx.publish()``):
the write of an attempt's buffered reports, fenced by its claim, and the reads of them. The
statements are in ``storage.sql.progress``; the tables are the app's own (``ActivityProgress``,
``PublishedEvent``), deleted with their activity's tree by retention and ``delete_tree``.

The bounds are here, checked before any SQL: an event's name and data, a progress message, and
how many events an activity keeps (the newest :data:`MAX_EVENTS_PER_ACTIVITY`; older ones go as
new ones are written, so a reader can tell it missed some from the sequence numbers).
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import progress as q
from runnerq_django.storage.types import Claim

__all__ = [
    "MAX_EVENTS_PER_ACTIVITY",
    "MAX_EVENTS_PER_READ",
    "MAX_EVENT_DATA_BYTES",
    "MAX_EVENT_NAME_BYTES",
    "MAX_MESSAGE_BYTES",
    "Progress",
    "PublishedEvent",
    "channel",
    "event_data",
    "event_name",
    "get_progress",
    "latest_event",
    "progress_value",
    "read_events",
    "write",
]

# An event's name: 1 to this many bytes of UTF-8.
MAX_EVENT_NAME_BYTES = 200
# An event's data: JSON of at most this many bytes.
MAX_EVENT_DATA_BYTES = 16 * 1024
# A progress message: at most this many bytes of UTF-8.
MAX_MESSAGE_BYTES = 1024
# The events an activity keeps: the newest ones (16 MiB of data at most per activity).
MAX_EVENTS_PER_ACTIVITY = 1000
# Events one read returns at most.
MAX_EVENTS_PER_READ = 1000
# done and total: finite numbers from 0 up to this (exact as integers in a float64).
MAX_COUNT = 2**53

CHANNEL_PREFIX = "runnerq_progress_"
_MAX_CHANNEL_BYTES = 63


@dataclass(frozen=True)
class Progress:
    """The latest progress an activity reported: ``done`` of ``total`` (``None``: unknown), a
    ``message``, and when it was written (the database's clock). Whole numbers come back as
    ``int``."""

    done: int | float
    total: int | float | None
    message: str | None
    updated_at: datetime | None = None

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1, or ``None`` without a total (1.0 for a total of 0)."""
        if self.total is None:
            return None
        if self.total <= 0:
            return 1.0
        return max(0.0, min(1.0, self.done / self.total))

    @property
    def percent(self) -> int | None:
        fraction = self.fraction
        return None if fraction is None else int(fraction * 100)


@dataclass(frozen=True)
class PublishedEvent:
    """One event an activity published: its sequence number (1, 2, ... per activity), name, data,
    the attempt that published it, and when it was written (the database's clock)."""

    seq: int
    name: str
    data: Any
    attempt: int
    created_at: datetime


def channel(queue: str) -> str:
    """The LISTEN/NOTIFY channel announcing progress and events of ``queue``'s activities
    (payload: the activity id). The queue's name when it fits Postgres's identifier limit, its
    hash otherwise."""
    name = CHANNEL_PREFIX + queue
    if len(name.encode()) > _MAX_CHANNEL_BYTES:
        name = CHANNEL_PREFIX + hashlib.sha256(queue.encode()).hexdigest()[:40]
    return name


def _count(field: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise check.invalid(field, f"must be a number 0..{MAX_COUNT}, got {type(value).__name__}")
    if not math.isfinite(value) or not 0 <= value <= MAX_COUNT:
        raise check.invalid(field, f"must be a finite number 0..{MAX_COUNT}, got {value!r}")
    return value


def progress_value(done: Any, total: Any = None, message: Any = None) -> tuple[Any, Any, Any]:
    """``(done, total, message)`` checked: finite numbers 0..2**53 (``total`` may be ``None``), a
    message of at most :data:`MAX_MESSAGE_BYTES` bytes or ``None``."""
    done = _count("done", done)
    if total is not None:
        total = _count("total", total)
    if message is not None:
        message = check.text("message", message, MAX_MESSAGE_BYTES, allow_empty=True)
    return done, total, message


def event_name(name: Any) -> str:
    """An event's name, checked: a non-empty string of at most :data:`MAX_EVENT_NAME_BYTES` bytes."""
    return check.text("name", name, MAX_EVENT_NAME_BYTES)


def event_data(data: Any) -> str:
    """An event's data as its JSON text, checked: JSON of at most :data:`MAX_EVENT_DATA_BYTES`."""
    return check.json_text("data", data, MAX_EVENT_DATA_BYTES)


def _number(value: Any) -> int | float | None:
    if value is None:
        return None
    value = float(value)
    return int(value) if value.is_integer() else value


@db.operation
def write(
    queue: str,
    claim: Claim,
    *,
    attempt: int,
    progress: tuple[Any, Any, Any] | None = None,
    events: Sequence[tuple[str, Any]] = (),
    using: str | None = None,
) -> int | None:
    """Write an attempt's latest ``progress`` (``(done, total, message)``, or ``None`` to keep the
    stored one) and its ``events`` (``(name, data)`` pairs, oldest first; only the newest
    :data:`MAX_EVENTS_PER_ACTIVITY` are kept) in one statement, fenced by ``claim``, and notify
    :func:`channel`. Returns the activity's last event sequence number, or ``None`` when the claim
    no longer owns the activity (nothing is written)."""
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    attempt = check.integer("attempt", attempt, 0, 2**31 - 1)
    done = total = message = None
    if progress is not None:
        done, total, message = progress_value(*progress)
    pairs = [f"[{json.dumps(event_name(name))},{event_data(data)}]" for name, data in events]
    params = {
        "id": claim.id,
        "token": claim.token,
        "queue": queue,
        "attempt": attempt,
        "has_progress": progress is not None,
        "done": None if done is None else float(done),
        "total": None if total is None else float(total),
        "message": message,
        "n": len(pairs),
        "events": "[" + ",".join(pairs) + "]",
        "keep": MAX_EVENTS_PER_ACTIVITY,
        "channel": channel(queue),
    }
    row = db.fetch_one(db.alias_for(using), q.WRITE, params)
    return None if row is None else int(row[0])


@db.operation
def get_progress(queue: str, activity_id: uuid.UUID, *, using: str | None = None) -> Progress | None:
    """The latest progress of ``activity_id``, or ``None`` when it reported none (or is gone)."""
    queue = check.queue_name(queue)
    activity_id = check.activity_id("activity_id", activity_id)
    row = db.fetch_one(db.alias_for(using), q.GET_PROGRESS, {"id": activity_id, "queue": queue})
    if row is None or row[0] is None:
        return None
    done = _number(row[0])
    assert done is not None
    return Progress(done, _number(row[1]), row[2], row[3])


@db.operation
def read_events(
    queue: str,
    activity_id: uuid.UUID,
    *,
    after: int = 0,
    limit: int = MAX_EVENTS_PER_READ,
    using: str | None = None,
) -> tuple[list[PublishedEvent], bool]:
    """Up to ``limit`` events of ``activity_id`` after sequence number ``after``, oldest first, and
    whether the activity had ended (finished, or gone) when they were read: then these and the
    ones before are all it will ever publish."""
    queue = check.queue_name(queue)
    activity_id = check.activity_id("activity_id", activity_id)
    after = check.integer("after", after, 0, 2**63 - 1)
    limit = check.integer("limit", limit, 1, MAX_EVENTS_PER_READ)
    rows = db.fetch_all(
        db.alias_for(using),
        q.READ_EVENTS,
        {"id": activity_id, "queue": queue, "after": after, "limit": limit},
    )
    ended = bool(rows[0][0]) if rows else True
    events = [
        PublishedEvent(int(seq), name, json.loads(data), int(attempt), created_at)
        for _, seq, name, data, attempt, created_at in rows
        if seq is not None
    ]
    return events, ended


@db.operation
def latest_event(queue: str, activity_id: uuid.UUID, name: str, *, using: str | None = None) -> Any:
    """The data of the newest event named ``name`` that ``activity_id`` published (among those it
    keeps), or ``None``."""
    check.queue_name(queue)
    activity_id = check.activity_id("activity_id", activity_id)
    name = event_name(name)
    row = db.fetch_one(db.alias_for(using), q.LATEST_EVENT, {"id": activity_id, "name": name})
    return None if row is None else json.loads(row[1])
