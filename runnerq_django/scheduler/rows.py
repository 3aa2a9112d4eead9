"""Runtime schedules: periodic jobs kept in Postgres, validated by the rules of declared jobs.

A row of ``runnerq_schedules`` (``tables.RuntimeSchedule``) becomes a :class:`RowJob`, a
:class:`~runnerq_django.scheduler.declarations.PeriodicJob` with what only rows have (a one-off
instant, jitter, a cap on occurrences, the revision and the floor of its timing), so the
scheduler runs both kinds through the same machinery and a row is refused for exactly what a
declaration is refused for, with the same message (``PeriodicJob.validate``).

The API (``runnerq_django.scheduler.runtime_schedules`` re-exports it): :func:`create`, :func:`update`,
:func:`pause`, :func:`resume`, :func:`delete`, :func:`get`, :func:`list_schedules`,
:func:`run_now`, :func:`preview`. Each write is one transaction on ``RUNNERQ['DATABASE']`` that
joins the caller's ``transaction.atomic()`` (like ``enqueue``), locks the row, writes it and its
history row (``runnerq_schedule_changes``: who, what changed, the new revision).
"""

from __future__ import annotations

import builtins
import getpass
import hashlib
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_django.scheduler.declarations import (
    DEFAULT_GRACE,
    DeclarationError,
    PeriodicJob,
    fingerprint,
)
from runnerq_django.scheduler.schedules import (
    Bounded,
    Schedule,
    ScheduleError,
    format_instant,
    parse_instant,
)

if TYPE_CHECKING:
    from runnerq_django.models import RuntimeSchedule, ScheduleChange

MAX_JITTER_SECONDS = 86400
MAX_DESCRIPTION_CHARS = 2000
MAX_PREVIEW = 50
# The fields a caller sets (the database keeps revision, change_seq, timing_changed_at, the times).
EDITABLE = (
    "activity",
    "payload",
    "queue",
    "priority",
    "kind",
    "cron",
    "tz",
    "every_seconds",
    "anchor",
    "at",
    "start_at",
    "end_at",
    "enabled",
    "misfire_grace_seconds",
    "coalesce",
    "max_catch_up",
    "catch_up_after_repair",
    "jitter_seconds",
    "max_occurrences",
    "description",
)
# API argument -> column, for the arguments named like declarations (cron=, every=, start= ...).
ARGUMENT_COLUMNS = {
    "every": "every_seconds",
    "start": "start_at",
    "end": "end_at",
    "misfire_grace": "misfire_grace_seconds",
    "jitter": "jitter_seconds",
}
# The field a validation message is about, by the way the shared rules start their messages.
MESSAGE_FIELDS = (
    ("cron", "cron"),
    ("tz", "tz"),
    ("every", "every_seconds"),
    ("anchor", "anchor"),
    ("at", "at"),
    ("start", "start_at"),
    ("end", "end_at"),
    ("payload", "payload"),
    ("queue", "queue"),
    ("priority", "priority"),
    ("activity", "activity"),
    ("misfire_grace", "misfire_grace_seconds"),
    ("max_catch_up", "max_catch_up"),
    ("jitter", "jitter_seconds"),
    ("max_occurrences", "max_occurrences"),
    ("description", "description"),
    ("id", "id"),
    ("declare", "activity"),
)


class ScheduleInvalid(DeclarationError):
    """A schedule the scheduler could not run: ``errors`` maps each field to its problems (the
    messages ``manage.py check`` gives for the same mistake in a declaration)."""

    def __init__(self, schedule_id: str, errors: dict[str, list[str]]):
        self.schedule_id = schedule_id
        self.errors = errors
        problems = "; ".join(message for messages in errors.values() for message in messages)
        super().__init__(f"schedule {schedule_id!r}: {problems}")


class ScheduleNotFound(DeclarationError, LookupError):
    """No schedule with that id."""


class RevisionConflict(DeclarationError):
    """``update(..., expected_revision=n)`` found another revision: someone changed it first."""


# --- the one-off schedule --------------------------------------------------------------------
@dataclass(frozen=True)
class OnceSchedule(Schedule):
    """One instant (a one-off): it fires once, then never again."""

    at: datetime

    def __post_init__(self) -> None:
        at = parse_instant(self.at, "at")
        if at.microsecond:
            raise ScheduleError(f"at: must be a whole second, got {format_instant(at)}.{at.microsecond:06d}")
        object.__setattr__(self, "at", at)

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        return [self.at] if after < self.at <= until else []

    def next_after(self, moment: datetime) -> datetime | None:
        return self.at if moment < self.at else None

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        return self.at if self.at <= moment else None

    def fingerprint_data(self) -> dict[str, Any]:
        return {"at": format_instant(self.at)}

    def longest_period(self) -> timedelta:
        return timedelta(days=1)

    def describe(self) -> str:
        return f"once at {format_instant(self.at)}"


def _ceil_second(value: datetime) -> datetime:
    return value.replace(microsecond=0) + timedelta(seconds=1) if value.microsecond else value


# --- a row as a job ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowJob(PeriodicJob):
    """A schedule row as the scheduler runs it. ``floor`` (the row's ``timing_changed_at``) bounds
    its occurrences from below: creating a schedule or changing its timing never reaches back
    into the past of the new timing. The schedule fingerprint covers the floor, so a record
    written for another timing is rebuilt; the definition fingerprint covers the revision, so a
    record written for another revision is rewritten (progress kept)."""

    at: datetime | str | None = None
    jitter: int = 0
    max_occurrences: int | None = None
    occurrence_count: int = 0
    floor: datetime | None = None
    revision: int = 0
    description: str = ""

    def _build_schedule(self) -> Schedule:
        start: datetime | None
        end: datetime | None
        inner: Schedule
        if self.at is not None:
            if self.cron is not None or self.every is not None:
                raise ScheduleError("declare exactly one of cron=..., every=... or at=...")
            inner = OnceSchedule(parse_instant(self.at, "at"))
            start = None if self.start is None else parse_instant(self.start, "start")
            end = None if self.end is None else parse_instant(self.end, "end")
            if start and end and end <= start:
                raise ScheduleError("end: must be after start")
        else:
            built = PeriodicJob._build_schedule(self)
            if isinstance(built, Bounded):
                inner, start, end = built.inner, built.start, built.end
            else:
                inner, start, end = built, None, None
        floor = _ceil_second(self.floor) if self.floor is not None else None
        low = max([x for x in (start, floor) if x is not None], default=None)
        return Bounded(inner, low, end) if (low or end) else inner

    def definition_fingerprint(self) -> str:
        return fingerprint(
            {
                "declared": super().definition_fingerprint(),
                "revision": self.revision,
                "jitter": self.jitter,
                "max_occurrences": self.max_occurrences,
            }
        )

    def validate(self) -> builtins.list[str]:
        problems = super().validate()
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int)
            or not 0 <= self.jitter <= MAX_JITTER_SECONDS
        ):
            problems.append(f"jitter: must be 0..{MAX_JITTER_SECONDS} seconds, got {self.jitter!r}")
        if self.max_occurrences is not None and (
            isinstance(self.max_occurrences, bool)
            or not isinstance(self.max_occurrences, int)
            or self.max_occurrences < 1
        ):
            problems.append(
                f"max_occurrences: must be a whole number >= 1 or empty, got {self.max_occurrences!r}"
            )
        if not isinstance(self.description, str) or len(self.description) > MAX_DESCRIPTION_CHARS:
            problems.append(f"description: must be text of at most {MAX_DESCRIPTION_CHARS} characters")
        return problems

    def jitter_for(self, occurrence: datetime) -> timedelta:
        """The delay of ``occurrence``: the same in every process (a hash of the id and instant)."""
        if not self.jitter:
            return timedelta(0)
        digest = hashlib.sha256(f"{self.id}|{format_instant(occurrence)}".encode()).digest()
        return timedelta(seconds=int.from_bytes(digest[:8], "big") % (self.jitter + 1))

    @property
    def finished(self) -> bool:
        """Its cap on occurrences is reached."""
        return self.max_occurrences is not None and self.occurrence_count >= self.max_occurrences


def job_from_values(schedule_id: str, values: dict[str, Any], *, origin: str = "database") -> RowJob:
    """The job of a row's column values (``every_seconds`` as seconds or a timedelta, the grace
    likewise); nothing is checked here (``validate`` does)."""
    kind = values.get("kind") or "cron"
    every: Any = values.get("every_seconds")
    if isinstance(every, (int, float)) and not isinstance(every, bool):
        every = timedelta(seconds=every)
    grace = values.get("misfire_grace_seconds", DEFAULT_GRACE)
    if isinstance(grace, (int, float)) and not isinstance(grace, bool):
        grace = timedelta(seconds=grace)
    return RowJob(
        id=schedule_id,
        cron=(values.get("cron") or "") if kind == "cron" else None,
        tz=values.get("tz") or "UTC",
        every=every if kind == "interval" else None,
        anchor=values.get("anchor") if kind == "interval" else None,
        at=values.get("at") if kind == "once" else None,
        activity=values.get("activity") or None,
        payload=values.get("payload"),
        queue=values.get("queue") or None,
        priority=values.get("priority"),
        misfire_grace=grace,
        coalesce=values.get("coalesce", True),
        max_catch_up=values.get("max_catch_up", 10),
        catch_up_after_repair=values.get("catch_up_after_repair", True),
        start=values.get("start_at"),
        end=values.get("end_at"),
        enabled=values.get("enabled", True),
        origin=origin,
        jitter=values.get("jitter_seconds", 0),
        max_occurrences=values.get("max_occurrences"),
        occurrence_count=values.get("occurrence_count", 0) or 0,
        floor=values.get("timing_changed_at"),
        revision=values.get("revision", 0) or 0,
        description=values.get("description") or "",
    )


def job_of(row: RuntimeSchedule) -> RowJob:
    values = {
        name: getattr(row, name) for name in (*EDITABLE, "occurrence_count", "timing_changed_at", "revision")
    }
    return job_from_values(row.id, values)


def _field_of(message: str) -> str:
    head = message.split(":", 1)[0].split(" ", 1)[0]
    for prefix, column in MESSAGE_FIELDS:
        if head == prefix:
            return column
    return "__all__"


def problems_by_field(schedule_id: str, values: dict[str, Any]) -> dict[str, builtins.list[str]]:
    """Every problem of a schedule's values, by the field it is about (empty: it can run)."""
    kind = values.get("kind") or "cron"
    errors: dict[str, builtins.list[str]] = {}

    def add(column: str, message: str) -> None:
        errors.setdefault(column, []).append(message)

    if kind not in ("cron", "interval", "once"):
        add("kind", f"kind: must be cron, interval or once, got {kind!r}")
        return errors
    if kind == "interval" and values.get("every_seconds") is None:
        add("every_seconds", "every: an interval schedule needs a period (every=, at least 1 s)")
    if kind == "once" and values.get("at") is None:
        add("at", "at: a one-off schedule needs its instant (at=)")
    if kind == "cron" and not values.get("cron"):
        add("cron", "cron: a cron schedule needs an expression (cron=)")
    if errors:
        return errors
    for message in job_from_values(schedule_id, values).validate():
        add(_field_of(message), message)
    return errors


def check(schedule_id: str, values: dict[str, Any]) -> None:
    """Raise :class:`ScheduleInvalid` for values the scheduler could not run."""
    errors = problems_by_field(schedule_id, values)
    if errors:
        raise ScheduleInvalid(schedule_id, errors)


def declared_ids() -> set[str]:
    """Ids of the jobs declared in code: rows share their namespace (a clash is refused here and
    a check error, ``runnerq.E106``, for a row created before the declaration)."""
    from runnerq_django.scheduler import declarations

    return {job.id for job in declarations.declared_jobs() if isinstance(job.id, str)}


# --- the API ---------------------------------------------------------------------------------
def default_actor() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no user name (a container without one)
        user = "?"
    return f"code {user}@{socket.gethostname()}"


def _database(using: str | None) -> str:
    from runnerq_django import conf

    return using or conf.database_alias()


def _columns(arguments: dict[str, Any]) -> dict[str, Any]:
    """API arguments as column values (``every=timedelta(minutes=5)`` -> ``every_seconds``)."""
    values: dict[str, Any] = {}
    for name, value in arguments.items():
        column = ARGUMENT_COLUMNS.get(name, name)
        if column not in EDITABLE:
            raise TypeError(f"schedules: unknown field {name!r}")
        values[column] = value
    if "kind" not in values:
        if values.get("at") is not None:
            values["kind"] = "once"
        elif values.get("every_seconds") is not None:
            values["kind"] = "interval"
        elif values.get("cron"):
            values["kind"] = "cron"
    return values


def _stored(values: dict[str, Any]) -> dict[str, Any]:
    """Validated values as the columns store them (whole seconds, aware UTC instants)."""
    stored = dict(values)
    for column in ("every_seconds", "misfire_grace_seconds"):
        value = stored.get(column)
        if isinstance(value, timedelta):
            stored[column] = int(value.total_seconds())
    for column in ("anchor", "at", "start_at", "end_at"):
        value = stored.get(column)
        if value is not None:
            stored[column] = parse_instant(value, column.removesuffix("_at"))
    if stored.get("queue") == "":
        stored["queue"] = None
    kind = stored.get("kind")
    # Fields of the other kinds are cleared, so a row says one timing only.
    if kind == "cron":
        stored.update(every_seconds=None, anchor=None, at=None)
    elif kind == "interval":
        stored.update(cron="", at=None)
    elif kind == "once":
        stored.update(cron="", every_seconds=None, anchor=None)
    return stored


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _record(
    row_id: str,
    action: str,
    actor: str,
    *,
    revision: int | None,
    changes: dict[str, Any] | None = None,
    reason: str = "",
    activity_id: Any = None,
    using: str,
) -> ScheduleChange:
    from runnerq_django.models import ScheduleChange

    return ScheduleChange.objects.using(using).create(
        schedule_id=row_id,
        revision=revision,
        action=action,
        actor=actor,
        reason=reason,
        changes=changes or {},
        activity_id=activity_id,
    )


def create(
    id: str,
    *,
    activity: str,
    actor: str | None = None,
    reason: str = "",
    using: str | None = None,
    **fields: Any,
) -> RuntimeSchedule:
    """Create a schedule: ``cron=`` with ``tz=``, ``every=`` (seconds or a timedelta) with
    ``anchor=``, or ``at=`` (one instant); ``payload``, ``queue``, ``priority``, ``start``,
    ``end``, ``enabled``, ``misfire_grace``, ``coalesce``, ``max_catch_up``,
    ``catch_up_after_repair``, ``jitter``, ``max_occurrences``, ``description`` as for a declared
    job. Raises :class:`ScheduleInvalid` (by field) for what ``manage.py check`` would refuse in
    a declaration, and for an id already declared in code or taken by another schedule."""
    from django.db import IntegrityError, transaction

    from runnerq_django.models import RuntimeSchedule

    alias = _database(using)
    values = _columns({"activity": activity, **fields})
    values.setdefault("kind", "cron")
    check(id, values)
    if id in declared_ids():
        raise ScheduleInvalid(
            id,
            {
                "id": [
                    f"id {id!r} is a periodic job declared in code: declared jobs and schedules share one namespace of ids"
                ]
            },
        )
    stored = _stored(values)
    actor = actor or default_actor()
    try:
        with transaction.atomic(using=alias):
            row = RuntimeSchedule(id=id, created_by=actor, updated_by=actor, **stored)
            row.save(using=alias, force_insert=True)
            row.refresh_from_db(using=alias)
            _record(
                id,
                "created",
                actor,
                revision=row.revision,
                changes={k: [None, _plain(v)] for k, v in stored.items()},
                reason=reason,
                using=alias,
            )
    except IntegrityError as exc:
        raise ScheduleInvalid(id, {"id": [f"id {id!r} is taken by another schedule"]}) from exc
    return row


def _locked(schedule_id: str, alias: str) -> RuntimeSchedule:
    from runnerq_django.models import RuntimeSchedule

    try:
        return RuntimeSchedule.objects.using(alias).select_for_update().get(pk=schedule_id)
    except RuntimeSchedule.DoesNotExist:
        raise ScheduleNotFound(f"no schedule {schedule_id!r}") from None


def _change(
    schedule_id: str,
    values: dict[str, Any],
    action: str,
    *,
    actor: str | None,
    reason: str,
    expected_revision: int | None,
    using: str | None,
) -> RuntimeSchedule:
    from django.db import transaction

    alias = _database(using)
    actor = actor or default_actor()
    with transaction.atomic(using=alias):
        row = _locked(schedule_id, alias)
        if expected_revision is not None and row.revision != expected_revision:
            raise RevisionConflict(
                f"schedule {schedule_id!r} is at revision {row.revision}, not {expected_revision}: "
                "it was changed meanwhile"
            )
        current = {name: getattr(row, name) for name in EDITABLE}
        merged = {**current, **values}
        if merged.get("kind") in ("interval", "once") and "tz" not in values:
            merged["tz"] = "UTC"  # a zone is the cron's alone: switching to another kind drops it
        check(schedule_id, merged)
        stored = _stored(merged)
        changes = {k: [_plain(current[k]), _plain(v)] for k, v in stored.items() if current[k] != v}
        if not changes:
            return row
        for name, value in stored.items():
            setattr(row, name, value)
        row.updated_by = actor
        row.save(using=alias, update_fields=[*stored, "updated_by"])
        row.refresh_from_db(using=alias)
        _record(
            schedule_id, action, actor, revision=row.revision, changes=changes, reason=reason, using=alias
        )
        return row


def update(
    id: str,
    *,
    actor: str | None = None,
    reason: str = "",
    expected_revision: int | None = None,
    using: str | None = None,
    **fields: Any,
) -> RuntimeSchedule:
    """Change some fields (the others stay); validated like :func:`create`. With
    ``expected_revision`` it refuses (:class:`RevisionConflict`) a row changed meanwhile.
    Changing the timing makes the new timing start now: no occurrence of it before the change
    is enqueued, and none enqueued already (same instant) is enqueued again."""
    values = _columns(fields) if fields else {}
    return _change(
        id, values, "updated", actor=actor, reason=reason, expected_revision=expected_revision, using=using
    )


def pause(
    id: str, *, actor: str | None = None, reason: str = "", using: str | None = None
) -> RuntimeSchedule:
    """Hold its occurrences until :func:`resume` (which follows the misfire policy)."""
    return _change(
        id, {"enabled": False}, "paused", actor=actor, reason=reason, expected_revision=None, using=using
    )


def resume(
    id: str, *, actor: str | None = None, reason: str = "", using: str | None = None
) -> RuntimeSchedule:
    """Run it again: held occurrences inside the misfire grace are enqueued as ``coalesce`` and
    ``max_catch_up`` say, older ones are skipped (logged ``periodic.misfire_skipped``)."""
    return _change(
        id, {"enabled": True}, "resumed", actor=actor, reason=reason, expected_revision=None, using=using
    )


def delete(id: str, *, actor: str | None = None, reason: str = "", using: str | None = None) -> bool:
    """Delete it (False if there was none). Its activities stay; its cache record expires."""
    from django.db import transaction

    alias = _database(using)
    actor = actor or default_actor()
    with transaction.atomic(using=alias):
        try:
            row = _locked(id, alias)
        except ScheduleNotFound:
            return False
        before = {name: _plain(getattr(row, name)) for name in EDITABLE}
        revision = row.revision
        row.delete(using=alias)
        _record(
            id,
            "deleted",
            actor,
            revision=revision,
            changes={k: [v, None] for k, v in before.items()},
            reason=reason,
            using=alias,
        )
    return True


def get(id: str, *, using: str | None = None) -> RuntimeSchedule:
    """The schedule (:class:`ScheduleNotFound` if there is none)."""
    from runnerq_django.models import RuntimeSchedule

    try:
        return RuntimeSchedule.objects.using(_database(using)).get(pk=id)
    except RuntimeSchedule.DoesNotExist:
        raise ScheduleNotFound(f"no schedule {id!r}") from None


def list_schedules(
    *, enabled: bool | None = None, using: str | None = None
) -> builtins.list[RuntimeSchedule]:
    """Every schedule, by id (``enabled=True``/``False``: only the running / paused ones)."""
    from runnerq_django.models import RuntimeSchedule

    rows = RuntimeSchedule.objects.using(_database(using)).order_by("id")
    if enabled is not None:
        rows = rows.filter(enabled=enabled)
    return builtins.list(rows)


def runtime_jobs(*, using: str | None = None) -> builtins.list[RowJob]:
    """Every row as a job, by id (none when the table is not there yet: not migrated)."""
    from django.db import DatabaseError

    from runnerq_django.models import RuntimeSchedule

    try:
        return [job_of(row) for row in RuntimeSchedule.objects.using(_database(using)).order_by("id")]
    except DatabaseError:
        return []


def history(id: str, *, limit: int = 50, using: str | None = None) -> builtins.list[ScheduleChange]:
    """Its changes (and runs now), newest first."""
    from runnerq_django.models import ScheduleChange

    return builtins.list(
        ScheduleChange.objects.using(_database(using)).filter(schedule_id=id).order_by("-at", "-id")[:limit]
    )


def run_now(
    id: str,
    *,
    actor: str | None = None,
    reason: str = "",
    command_id: str | None = None,
    using: str | None = None,
) -> tuple[Any, bool]:
    """Enqueue one activity of the schedule now, outside its timing (no occurrence is used up,
    the cap does not count it), recorded in its history. ``command_id`` (minted by the admin's
    form) makes a resubmitted form return the same activity: ``(activity_id, created)``."""
    import uuid

    from django.db import transaction

    from runnerq_django import client

    alias = _database(using)
    actor = actor or default_actor()
    command_id = command_id or uuid.uuid4().hex
    with transaction.atomic(using=alias):
        row = _locked(id, alias)
        job = job_of(row)
        target = job.handler() or job.activity_type()
        handle = client.enqueue(
            target,
            job.payload,
            queue=job.queue,
            priority=job.priority,
            idempotency_key=f"schedule-run:{id}:{command_id}",
            on_duplicate="return_existing",
            metadata={"periodic_job": id, "periodic_run_now": "true", "periodic_run_by": actor[:200]},
        )
        activity_id = handle.id
        created = not _recorded(alias, id, activity_id)
        if created:
            _record(
                id,
                "run_now",
                actor,
                revision=row.revision,
                reason=reason,
                activity_id=activity_id,
                using=alias,
            )
    return activity_id, created


def _recorded(alias: str, schedule_id: str, activity_id: Any) -> bool:
    from runnerq_django.models import ScheduleChange

    return (
        ScheduleChange.objects.using(alias).filter(schedule_id=schedule_id, activity_id=activity_id).exists()
    )


def preview(
    values: dict[str, Any], *, count: int = 5, after: datetime | None = None, schedule_id: str = "preview"
) -> builtins.list[datetime]:
    """The next ``count`` occurrences of these values (as the admin's form holds them) after
    ``after`` (default now), raising :class:`ScheduleInvalid` like :func:`create`."""
    count = max(1, min(count, MAX_PREVIEW))
    values = dict(values)
    values.setdefault("activity", values.get("activity") or "preview")
    errors = {
        field: messages
        for field, messages in problems_by_field(schedule_id, values).items()
        if field not in ("activity", "payload", "queue", "priority", "id")
    }
    if errors:
        raise ScheduleInvalid(schedule_id, errors)
    schedule = job_from_values(schedule_id, {**values, "activity": "preview"}).schedule
    moment = after or datetime.now(UTC)
    found: builtins.list[datetime] = []
    while len(found) < count:
        nxt = schedule.next_after(moment)
        if nxt is None:
            break
        found.append(nxt)
        moment = nxt
    return found


__all__ = [
    "OnceSchedule",
    "RevisionConflict",
    "RowJob",
    "ScheduleInvalid",
    "ScheduleNotFound",
    "check",
    "create",
    "delete",
    "get",
    "history",
    "job_of",
    "list_schedules",
    "pause",
    "preview",
    "problems_by_field",
    "resume",
    "run_now",
    "update",
]
