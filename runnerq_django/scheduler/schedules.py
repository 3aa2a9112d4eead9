"""Schedules: cron expressions in a time zone, and anchored intervals.

Both produce *nominal* occurrences: deterministic UTC instants that every process computes alike,
so an occurrence's identity (and its idempotency key) never depends on when or where it is
evaluated. Occurrences are whole seconds.

Daylight-saving policy of cron schedules (explicit, the same in every process):

- The expression is evaluated on the *wall clock* of the zone (croniter on naive local times),
  and each wall time is turned into an instant with Python's ``fold=0`` rule.
- A wall time that happens twice (autumn fall-back, e.g. 02:30 in Europe/Paris on the last Sunday
  of October) fires **once**, at its first instant (the daylight-time one).
- A wall time that does not exist (spring forward, e.g. 02:30 on the last Sunday of March) fires
  **once**, shifted forward by the length of the gap (02:30 CET doesn't exist, so it fires at the
  instant 02:30 CET would have been, 03:30 CEST). When that instant is also another occurrence
  of the schedule, it is the same occurrence (one key, one activity).

Anchored intervals are absolute: ``anchor + k * every`` in UTC, unaffected by time zones, so a
repair in any process lands on the same lattice point (unanchored "every 5 minutes from now"
would re-anchor on every restart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runnerq_django.exceptions import RunnerQError

UTC = UTC
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)

# Widest wall-clock shift a zone transition makes (real zones use at most 2 h); cron evaluation
# looks this far around a window that contains a transition.
_TRANSITION_MARGIN = timedelta(hours=3)
_SAMPLE_STEP = timedelta(hours=6)
# A deterministic reference instant for properties that must be equal in every process (TTL).
_REFERENCE = datetime(2001, 1, 1, tzinfo=UTC)


class ScheduleError(RunnerQError, ValueError):
    """A schedule declaration that cannot be evaluated (bad cron, zone, anchor or period)."""


def parse_instant(value: datetime | str, field: str = "anchor") -> datetime:
    """An aware datetime from an aware datetime or an ISO 8601 string with an offset (``Z`` ok)."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            value = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ScheduleError(f"{field}: not an ISO 8601 instant: {value!r}") from exc
    if not isinstance(value, datetime):
        raise ScheduleError(f"{field}: must be an aware datetime or an ISO 8601 string, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(f"{field}: must carry a UTC offset (an aware datetime or '...Z'), got {value!r}")
    return value.astimezone(UTC)


@overload
def format_instant(value: datetime) -> str: ...
@overload
def format_instant(value: None) -> None: ...
@overload
def format_instant(value: datetime | None) -> str | None: ...
def format_instant(value: datetime | None) -> str | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` (whole seconds, UTC), the form used in keys and records."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def floor_second(value: datetime) -> datetime:
    return value.replace(microsecond=0)


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ScheduleError(f"tz: unknown time zone {name!r}") from exc


@lru_cache(maxsize=4096)
def _check_cron(expression: str) -> None:
    """Refuse an invalid expression, or one that never fires (e.g. "0 0 30 2 *"), now rather than
    at run time (memoized: parsing is the expensive part of building a schedule)."""
    from croniter import croniter

    if not croniter.is_valid(expression):
        raise ScheduleError(f"cron: not a valid cron expression: {expression!r}")
    try:
        croniter(expression, datetime(2001, 1, 1)).get_next(datetime)
    except Exception as exc:  # croniter raises CroniterBadDateError and friends
        raise ScheduleError(f"cron: {expression!r} never fires ({exc})") from exc


class Schedule:
    """Occurrences of a schedule. All arguments and results are aware UTC datetimes."""

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Occurrences ``t`` with ``after < t <= until``, ascending, without duplicates."""
        raise NotImplementedError

    def next_after(self, moment: datetime) -> datetime | None:
        """The first occurrence strictly after ``moment`` (None if the schedule never fires again)."""
        raise NotImplementedError

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        raise NotImplementedError

    def fingerprint_data(self) -> dict[str, Any]:
        """What the schedule fingerprint covers (canonical JSON-able)."""
        raise NotImplementedError

    def longest_period(self) -> timedelta:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class IntervalSchedule(Schedule):
    """``anchor + k * every`` for every integer k: a lattice fixed in absolute time."""

    every: timedelta
    anchor: datetime = EPOCH

    def __post_init__(self) -> None:
        if not isinstance(self.every, timedelta):
            raise ScheduleError(f"every: must be a timedelta, got {self.every!r}")
        if self.every < SECOND or self.every % SECOND:
            raise ScheduleError(f"every: must be a whole number of seconds, at least 1 s; got {self.every!r}")
        anchor = parse_instant(self.anchor, "anchor")
        if anchor.microsecond:
            raise ScheduleError(
                f"anchor: must be a whole second, got {format_instant(anchor)}.{anchor.microsecond:06d}"
            )
        object.__setattr__(self, "anchor", anchor)

    def _k_floor(self, moment: datetime) -> int:
        return math.floor((moment - self.anchor) / self.every)

    def _at(self, k: int) -> datetime:
        return self.anchor + k * self.every

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        if until <= after:
            return []
        first = self._k_floor(after) + 1
        last = self._k_floor(until)
        return [self._at(k) for k in range(first, last + 1)]

    def count_between(self, after: datetime, until: datetime) -> int:
        return max(0, self._k_floor(until) - self._k_floor(after)) if until > after else 0

    def next_after(self, moment: datetime) -> datetime:
        return self._at(self._k_floor(moment) + 1)

    def latest_at_or_before(self, moment: datetime) -> datetime:
        return self._at(self._k_floor(moment))

    def fingerprint_data(self) -> dict[str, Any]:
        return {"every": int(self.every.total_seconds()), "anchor": format_instant(self.anchor)}

    def longest_period(self) -> timedelta:
        return self.every

    def describe(self) -> str:
        return f"every {int(self.every.total_seconds())}s from {format_instant(self.anchor)}"


@dataclass(frozen=True)
class CronSchedule(Schedule):
    """A cron expression (croniter syntax: 5 fields, or 6 with seconds last) in an IANA zone."""

    expression: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise ScheduleError(f"cron: not a valid cron expression: {self.expression!r}")
        _check_cron(self.expression)
        if not isinstance(self.tz, str):
            raise ScheduleError(f"tz: must be a time zone name, got {self.tz!r}")
        zone(self.tz)

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.tz)

    def _local(self, moment: datetime) -> datetime:
        return moment.astimezone(self.zone).replace(tzinfo=None)

    def _instant(self, wall: datetime) -> datetime:
        # fold=0: an ambiguous wall time maps to its first instant, a nonexistent one is shifted
        # forward by the gap (see the module docstring).
        return wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)

    def _margin(self, start: datetime, end: datetime) -> timedelta:
        """How far around ``[start, end]`` wall times must be scanned: 0 unless the window
        contains a change of UTC offset (transitions are months apart, so sampling every 6 h
        finds any)."""
        if self.tz in ("UTC", "Etc/UTC", "GMT", "Etc/GMT"):
            return timedelta(0)
        probe = start - _TRANSITION_MARGIN
        offset = probe.astimezone(self.zone).utcoffset()
        stop = end + _TRANSITION_MARGIN
        while probe < stop:
            probe = min(probe + _SAMPLE_STEP, stop)
            if probe.astimezone(self.zone).utcoffset() != offset:
                return _TRANSITION_MARGIN
        return timedelta(0)

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        from croniter import croniter

        if until <= after:
            return []
        margin = self._margin(after, until)
        wall_start = self._local(after) - margin
        wall_stop = self._local(until) + margin
        iterator = croniter(self.expression, wall_start)
        found: set[datetime] = set()
        while True:
            wall = iterator.get_next(datetime)
            if wall > wall_stop:
                break
            instant = self._instant(wall)
            if after < instant <= until:
                found.add(instant)
        return sorted(found)

    # Memoized (the schedule is immutable, the answer deterministic): a tick asks the same
    # question of every job that shares an expression (thousands of runtime schedules may).
    @lru_cache(maxsize=65536)  # noqa: B019
    def next_after(self, moment: datetime) -> datetime:
        from croniter import croniter

        margin = self._margin(moment, moment)
        iterator = croniter(self.expression, self._local(moment) - margin)
        best: datetime | None = None
        while True:
            wall = iterator.get_next(datetime)
            instant = self._instant(wall)
            if instant > moment and (best is None or instant < best):
                best = instant
            # Past the margin, wall order equals instant order again: nothing earlier can follow.
            if best is not None and wall > self._local(best) + margin:
                return best

    @lru_cache(maxsize=65536)  # noqa: B019
    def latest_at_or_before(self, moment: datetime) -> datetime:
        from croniter import croniter

        margin = self._margin(moment, moment)
        iterator = croniter(self.expression, self._local(moment) + margin + SECOND)
        best: datetime | None = None
        while True:
            wall = iterator.get_prev(datetime)
            instant = self._instant(wall)
            if instant <= moment and (best is None or instant > best):
                best = instant
            if best is not None and wall < self._local(best) - margin:
                return best

    def fingerprint_data(self) -> dict[str, Any]:
        return {"cron": " ".join(self.expression.split()), "tz": self.tz}

    def longest_period(self) -> timedelta:
        # Deterministic (the same reference in every process), so TTLs are convergent too.
        previous = self.next_after(_REFERENCE)
        longest = timedelta(0)
        for _ in range(60):
            following = self.next_after(previous)
            longest = max(longest, following - previous)
            previous = following
        return longest

    def describe(self) -> str:
        return f"cron {self.expression!r} in {self.tz}"


@dataclass(frozen=True)
class Bounded(Schedule):
    """A schedule limited to ``[start, end]`` (either bound optional)."""

    inner: Schedule
    start: datetime | None = None
    end: datetime | None = None

    def _inside(self, moment: datetime) -> bool:
        return (self.start is None or moment >= self.start) and (self.end is None or moment <= self.end)

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        if self.start is not None:
            after = max(after, self.start - timedelta(microseconds=1))
        if self.end is not None:
            until = min(until, self.end)
        return self.inner.between(after, until)

    def next_after(self, moment: datetime) -> datetime | None:
        if self.start is not None and moment < self.start:
            moment = self.start - timedelta(microseconds=1)
        found = self.inner.next_after(moment)
        return found if found is not None and self._inside(found) else None

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        if self.end is not None and moment > self.end:
            moment = self.end
        found = self.inner.latest_at_or_before(moment)
        return found if found is not None and self._inside(found) else None

    def fingerprint_data(self) -> dict[str, Any]:
        return {
            **self.inner.fingerprint_data(),
            "start": format_instant(self.start),
            "end": format_instant(self.end),
        }

    def longest_period(self) -> timedelta:
        return self.inner.longest_period()

    def describe(self) -> str:
        bounds = []
        if self.start:
            bounds.append(f"from {format_instant(self.start)}")
        if self.end:
            bounds.append(f"until {format_instant(self.end)}")
        return " ".join([self.inner.describe(), *bounds])
