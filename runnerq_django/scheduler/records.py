"""The per-job cache record: key, JSON value, validation, TTL.

Key: ``periodic:v1:{namespace}:job:{job_id}`` (Django's KEY_PREFIX/VERSION are added on top by the
backend). The schema version is in the key, so a format change orphans the old keys, which then
expire through their TTL; keys of jobs no longer declared are never read again and expire too.

Value: a plain JSON-able dict, never a pickled callable::

    {"v": 1, "job": "billing.close_day", "sfp": "<schedule fp>", "dfp": "<definition fp>",
     "last": "2024-05-01T04:00:00Z" | null,   # the last enqueued nominal occurrence
     "next": "2024-05-02T04:00:00Z" | null,   # the next occurrence not yet handled
     "by": {"node": "host:pid:xxxx", "release": 3}, "at": "2024-05-01T04:00:01Z"}

The record is a progress *hint*: the enqueue's idempotency key in Postgres is what makes each
occurrence happen once, so every write is convergent (racing writers compute the same ``last``
and ``next``) and last-writer-wins is safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_django.scheduler.schedules import ScheduleError, format_instant, parse_instant

SCHEMA_VERSION = 1
MIN_TTL = timedelta(days=35)

# Repair reasons (and the one informational mismatch).
MISSING = "missing"
UNREADABLE = "unreadable"
SCHEMA = "schema"
SCHEDULE_CHANGED = "schedule_changed"
IMPLAUSIBLE = "implausible"  # well-formed, but no scheduler writes that progress for this schedule
STALE_DEFINITION = "stale_definition"
REASONS = (MISSING, UNREADABLE, SCHEMA, SCHEDULE_CHANGED, IMPLAUSIBLE)


def key_for(namespace: str, job_key: str) -> str:
    """``job_key`` is ``job:{id}`` for declared jobs and ``beat:{name}`` for Celery beat entries."""
    return f"periodic:v{SCHEMA_VERSION}:{namespace}:{job_key}"


def ttl_for(longest_period: timedelta) -> int:
    """``max(35 days, 3 x the longest period)`` in whole seconds, so sparse jobs (yearly crons)
    outlive their own gaps, and a touch per tick keeps them alive between writes."""
    return int(max(MIN_TTL, 3 * longest_period).total_seconds())


@dataclass(frozen=True)
class Progress:
    """Where a job stands: ``next`` is the first occurrence not handled yet (None: never again)."""

    last: datetime | None
    next: datetime | None

    def advanced(self, other: Progress) -> Progress:
        """The furthest of two progresses of the same schedule (``last`` never moves back)."""
        last = max((x for x in (self.last, other.last) if x is not None), default=None)
        # next=None means the (bounded) schedule has finished, which stays finished.
        nxt = None if self.next is None or other.next is None else max(self.next, other.next)
        return Progress(last, nxt)


@dataclass(frozen=True)
class Record:
    job: str
    sfp: str
    dfp: str
    progress: Progress
    node: str
    release: int
    at: datetime | None

    def encode(self) -> dict[str, Any]:
        return {
            "v": SCHEMA_VERSION,
            "job": self.job,
            "sfp": self.sfp,
            "dfp": self.dfp,
            "last": format_instant(self.progress.last),
            "next": format_instant(self.progress.next),
            "by": {"node": self.node, "release": self.release},
            "at": format_instant(self.at),
        }

    def same_progress(self, other: Record | None) -> bool:
        return other is not None and (self.sfp, self.dfp, self.progress) == (
            other.sfp,
            other.dfp,
            other.progress,
        )


class Invalid(Exception):
    """A record that cannot be used; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _instant_or_none(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid(UNREADABLE, f"{name} is not a string: {value!r}")
    try:
        return parse_instant(value, name)
    except ScheduleError as exc:
        raise Invalid(UNREADABLE, str(exc)) from exc


def decode(value: Any, job_id: str) -> Record:
    """A validated record, or :class:`Invalid` (``unreadable`` or ``schema``). The schedule
    fingerprint is compared by the caller (``schedule_changed``)."""
    if not isinstance(value, dict):
        raise Invalid(UNREADABLE, f"not a JSON object: {type(value).__name__}")
    version = value.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise Invalid(UNREADABLE, f"v is not an integer: {version!r}")
    if version != SCHEMA_VERSION:
        raise Invalid(SCHEMA, f"record schema v{version}, this release reads v{SCHEMA_VERSION}")
    if value.get("job") != job_id:
        raise Invalid(UNREADABLE, f"job is {value.get('job')!r}, the key belongs to {job_id!r}")
    for name in ("sfp", "dfp"):
        if not isinstance(value.get(name), str) or not value[name]:
            raise Invalid(UNREADABLE, f"{name} is not a non-empty string")
    last = _instant_or_none(value.get("last"), "last")
    nxt = _instant_or_none(value.get("next"), "next")
    if last is not None and nxt is not None and not last < nxt:
        raise Invalid(UNREADABLE, f"last {format_instant(last)} is not before next {format_instant(nxt)}")
    by = value.get("by")
    node, release = "?", 0
    if isinstance(by, dict):
        node = str(by.get("node", "?"))
        release = by.get("release", 0) if isinstance(by.get("release", 0), int) else 0
    at = value.get("at")
    try:
        at = parse_instant(at, "at") if isinstance(at, str) else None
    except ScheduleError:
        at = None
    return Record(job_id, value["sfp"], value["dfp"], Progress(last, nxt), node, release, at)
