"""Read-repair at the point of use: classify each job's record and rebuild what can't be used.

Reasons, told apart (each gets its own log line, signal and counter):

- ``missing``: the key is absent (evicted, expired, flushed, or never written);
- ``unreadable``: the value could not be deserialized, is not a JSON object, or has bad types;
- ``schema``: a record of another schema version ``v``;
- ``schedule_changed``: the schedule fingerprint differs from the declaration's;
- ``implausible``: a well-formed record whose progress no scheduler would have written for the
  declared schedule (see :func:`implausible`): forged, so rebuilt like any other repair.

A definition-only change (``dfp``: payload, queue, grace ...) is not a repair: progress is kept,
the new definition is used (it is always read from code), and ``dfp`` is rewritten.

Rebuilt progress comes, in this order, from

1. **Postgres evidence**: the last enqueued occurrence of the job (``runnerq_periodic_occurrences``),
   which is exact, so an eviction never skips an occurrence that was due;
2. the **declaration**, when there is no evidence or the schedule changed: the latest occurrence
   inside the misfire grace is eligible now (``catch_up_after_repair=True``, the default; the
   enqueue dedupes it if it already ran) or the first occurrence after now (``False``). Nothing at
   or before the last enqueued instant of any earlier schedule is enqueued again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_django.scheduler import cacheio, records
from runnerq_django.scheduler.records import Invalid, Progress, Record
from runnerq_django.scheduler.schedules import Schedule, format_instant

if TYPE_CHECKING:
    from runnerq_django.scheduler.declarations import PeriodicJob

TINY = timedelta(microseconds=1)


@dataclass(frozen=True)
class JobSpec:
    """What the tick needs to know about one job: a declared job or a Celery beat entry."""

    job_id: str  # in occurrence rows and idempotency keys ("billing.close_day", "beat:name")
    key: str  # cache key
    schedule: Schedule
    sfp: str
    dfp: str
    misfire_grace: timedelta
    coalesce: bool
    max_catch_up: int
    catch_up_after_repair: bool
    ttl: int
    source: object = None  # the PeriodicJob / beat entry


@dataclass(frozen=True)
class Classified:
    state: str  # "present" or a reason; "stale_definition" = present with another dfp
    record: Record | None
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.record is not None and self.state in ("present", records.STALE_DEFINITION)

    @property
    def usable_record(self) -> Record | None:
        """The record, when its progress can be used as it is (``usable``)."""
        return self.record if self.usable else None


def classify(
    spec: JobSpec, found: bool, value: Any, now: datetime, evidence: datetime | None = None
) -> Classified:
    """``evidence``: the last occurrence Postgres enqueued, when known. Progress is judged against
    the later of ``now`` and it (a node whose clock runs ahead enqueues, and writes, ahead of now);
    the tick rechecks an ``implausible`` record with the evidence before repairing it."""
    if not found:
        return Classified(records.MISSING, None, "key absent")
    if cacheio.is_unreadable(value):
        error = cacheio.unreadable_error(value)
        return Classified(records.UNREADABLE, None, f"{type(error).__name__}: {error}")
    try:
        record = records.decode(value, spec.job_id)
    except Invalid as exc:
        return Classified(exc.reason, None, exc.detail)
    if record.sfp != spec.sfp:
        return Classified(records.SCHEDULE_CHANGED, record, f"sfp {record.sfp} != declared {spec.sfp}")
    problem = implausible(spec.schedule, record.progress, max(now, evidence) if evidence else now)
    if problem is not None:
        return Classified(records.IMPLAUSIBLE, record, problem)
    if record.dfp != spec.dfp:
        return Classified(records.STALE_DEFINITION, record, f"dfp {record.dfp} != declared {spec.dfp}")
    return Classified("present", record)


def implausible(schedule: Schedule, progress: Progress, now: datetime) -> str | None:
    """Why a record's progress is not one a scheduler writes for ``schedule`` by ``now`` (None: it
    is). A scheduler writes ``last`` = an occurrence it enqueued (so not after now) and ``next`` =
    an occurrence no later than the first one after now, or null once the schedule has ended.
    Anything else (a ``next`` far ahead would skip occurrences, a null one stop the job) is forged.
    ``last`` may lie off the schedule: after a schedule change it is the old schedule's last one."""
    last, nxt = progress.last, progress.next
    if nxt is not None and schedule.next_after(nxt - TINY) != nxt:
        return f"next {format_instant(nxt)} is not an occurrence of the schedule"
    if last is not None and last > now:
        return f"last {format_instant(last)} is after now ({format_instant(now)})"
    upcoming = schedule.next_after(now)
    if nxt is None and upcoming is not None:
        return f"next is null, but the schedule fires again at {format_instant(upcoming)}"
    if nxt is not None and upcoming is not None and nxt > upcoming:
        return (
            f"next {format_instant(nxt)} is after the schedule's next occurrence {format_instant(upcoming)}"
        )
    return None


def rebuild(spec: JobSpec, reason: str, now: datetime, evidence: datetime | None) -> tuple[Progress, str]:
    """Progress for a job whose record can't be used, and where it came from."""
    schedule = spec.schedule
    if evidence is not None and reason != records.SCHEDULE_CHANGED:
        return Progress(evidence, schedule.next_after(evidence)), "db_evidence"
    floor = max(now, evidence) if evidence is not None else now
    nxt = schedule.next_after(floor)
    if spec.catch_up_after_repair:
        latest = schedule.latest_at_or_before(now)
        if (
            latest is not None
            and latest >= now - spec.misfire_grace
            and (evidence is None or latest > evidence)
        ):
            nxt = latest
    return Progress(evidence, nxt), "declaration"


def due(spec: JobSpec, progress: Progress, now: datetime) -> DuePlan:
    """The occurrences of ``[progress.next, now]`` to enqueue now, after grace and coalescing."""
    schedule = spec.schedule
    if progress.next is None or progress.next > now:
        return DuePlan([], 0, [], [], progress)
    window_start = now - spec.misfire_grace
    dropped = 0
    first_dropped: datetime | None = None
    if progress.next < window_start:
        first_dropped = progress.next
        counter = getattr(schedule, "count_between", None)
        if counter is not None:
            dropped = counter(progress.next - TINY, window_start - TINY)
        else:
            dropped = (
                len(schedule.between(progress.next - TINY, window_start - TINY))
                if (window_start - progress.next) < timedelta(days=2)
                else -1
            )  # -1: many, not counted
    candidates = schedule.between(max(progress.next, window_start) - TINY, now)
    coalesced: list[datetime] = []
    deferred: list[datetime] = []
    if spec.coalesce:
        keep = candidates[-1:]
        coalesced = candidates[:-1]
    else:
        keep = candidates[: spec.max_catch_up]
        deferred = candidates[spec.max_catch_up :]
    plan = DuePlan(keep, dropped, coalesced, deferred, progress, first_dropped)
    return plan


@dataclass
class DuePlan:
    keep: list[datetime]
    dropped: int
    coalesced: list[datetime]
    deferred: list[datetime]
    before: Progress
    first_dropped: datetime | None = None

    def after(
        self, spec: JobSpec, now: datetime, done: list[datetime], failed_at: datetime | None
    ) -> Progress:
        """Progress once ``done`` are enqueued (``failed_at``: the first occurrence that wasn't)."""
        last = max([x for x in [self.before.last, *done] if x is not None], default=None)
        nxt: datetime | None
        if failed_at is not None:
            nxt = failed_at
        elif self.deferred:
            nxt = self.deferred[0]
        elif self.before.next is None or self.before.next > now:
            nxt = self.before.next
        else:
            nxt = spec.schedule.next_after(now)
        if last is not None and nxt is not None and nxt <= last:
            nxt = spec.schedule.next_after(last)
        return Progress(last, nxt)


def spec_for(job: PeriodicJob, namespace: str, *, longest_period: timedelta | None = None) -> JobSpec:
    """The tick's view of ``job``; ``longest_period`` (what the record's TTL follows) is the
    schedule's own unless the caller knows it already."""
    schedule = job.schedule
    return JobSpec(
        job_id=job.id,
        key=records.key_for(namespace, f"job:{job.id}"),
        schedule=schedule,
        sfp=job.schedule_fingerprint(),
        dfp=job.definition_fingerprint(),
        misfire_grace=job.misfire_grace,
        coalesce=job.coalesce,
        max_catch_up=job.max_catch_up,
        catch_up_after_repair=job.catch_up_after_repair,
        ttl=records.ttl_for(longest_period or schedule.longest_period()),
        source=job,
    )
