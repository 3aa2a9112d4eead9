"""One scheduler tick: read records, repair, enqueue what is due, then advance the records.

``SchedulerCore.tick(now=None)`` is ``plan`` + ``enqueue`` + ``advance``; the three phases are
public so that tests can move the lease between them (brief case 5).

1. ``now`` is Postgres ``now()`` (one clock for the fleet) unless a clock or ``now`` is given.
   Ownership: acquire or renew the lease (fencing on) -- a non-owner computes a view and writes
   nothing, and does not enqueue.
2. One read (``MGET``) over the declared keys, as JSON text (``cacheio``: never unpickled); each record is classified and, if it can't be used,
   rebuilt (Postgres evidence first, then the declaration). The owner logs/counts the repair.
3. Due occurrences are those of ``[next, now]`` inside the misfire grace, coalesced (latest only)
   or capped per tick.
4. Each job's occurrences are enqueued in one transaction with the fencing check.
5. After the commit, the owner writes the changed records (with the job's TTL) and
   touches unchanged ones about once an hour, so sparse jobs never expire.

The cache is a hint. When it is down the tick carries on from this process's memory and the
Postgres evidence (degraded mode), logs the outage once, backs off, and expects one ``missing``
repair per job (tagged ``after_outage``) when it returns.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache.backends.base import BaseCache

from runnerq_django import metrics, signals
from runnerq_django.logs import log_event
from runnerq_django.scheduler import cacheio, records, repair
from runnerq_django.scheduler.enqueue import EmitOutcome, Emitter
from runnerq_django.scheduler.fencing import Fenced, Lease
from runnerq_django.scheduler.records import Progress, Record
from runnerq_django.scheduler.repair import Classified, DuePlan, JobSpec
from runnerq_django.storage import periodic as store

logger = logging.getLogger("runnerq_django.scheduler")

PRUNE_EVERY = timedelta(hours=1)
PRUNE_BATCH = 5000
# First retry delay after a failed enqueue or send; it doubles per failure, up to max_interval.
RETRY_FIRST_SECONDS = 1.0
# The default monotonic clock, taken at import (a clock patched later, by a test, is not it).
_MONOTONIC = time.monotonic


def make_node_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def db_now(using: str) -> datetime:
    from runnerq_django.storage import periodic as store

    now: datetime = store.db_now(using=using)
    return now


def is_database_error(error: BaseException) -> bool:
    """A failure of the database (down, timing out, a conflict, an unexpected SQL error): the
    tick advances nothing and the next one retries. A refused argument is not one of those."""
    from django.db import Error

    from runnerq_django.storage.errors import ErrorKind, StorageError

    if isinstance(error, Error):
        return True
    return isinstance(error, StorageError) and error.kind in (
        ErrorKind.UNAVAILABLE,
        ErrorKind.TIMEOUT,
        ErrorKind.CONFLICT,
        ErrorKind.INTERNAL,
    )


@dataclass
class JobPlan:
    spec: JobSpec
    classified: Classified | None  # None in degraded mode (records not read)
    progress: Progress  # before this tick's enqueue
    repaired: str | None = None  # the repair reason, when the record was rebuilt
    source: str | None = None  # where rebuilt progress came from
    due: DuePlan | None = None
    outcome: EmitOutcome | None = None
    error: str | None = None
    result: Progress | None = None  # progress after the enqueue


@dataclass
class FailureStreak:
    """A job whose enqueue (or send) keeps failing for a reason other than the database: its
    due occurrence stays due, and the job is retried at ``retry_at`` (DB clock), backing off."""

    since: datetime
    retry_at: datetime
    failures: int
    error: str


@dataclass
class TickReport:
    now: datetime | None = None
    owner: bool = False
    writer: bool = False
    degraded: bool = False
    fenced: bool = False
    db_error: str | None = None
    enqueued: dict[str, list[datetime]] = field(default_factory=dict)
    existing: dict[str, list[datetime]] = field(default_factory=dict)
    repairs: list[tuple[str, str, str | None]] = field(default_factory=list)  # (job_id, reason, source)
    created: list[str] = field(default_factory=list)  # jobs whose first record this tick writes
    stale_definitions: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    views: dict[str, Progress] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    write_error: str | None = None
    failed: dict[str, str] = field(default_factory=dict)  # job_id -> error, jobs whose enqueue failed
    retrying: dict[str, datetime] = field(default_factory=dict)  # job_id -> retry time, jobs backing off
    sleep: float = 0.0
    jobs: list[JobPlan] = field(default_factory=list)

    def at(self) -> datetime:
        """``now``, which every phase after the lease's has (a tick whose lease phase failed has
        none, and no phase after it runs)."""
        if self.now is None:
            raise RuntimeError("this tick failed before it read the clock: it has no instant")
        return self.now

    def count_enqueued(self) -> int:
        return sum(len(v) for v in self.enqueued.values())


@dataclass
class Plan:
    report: TickReport
    jobs: list[JobPlan]
    records_read: bool = False
    after_outage: bool = False


class SchedulerCore:
    """The tick machinery shared by ``runscheduler`` and the Celery beat scheduler."""

    def __init__(
        self,
        specs: list[JobSpec],
        emitter: Emitter,
        *,
        namespace: str,
        cache: BaseCache,
        using: str,
        node: str | None = None,
        release: int = 0,
        fencing: bool = True,
        lease_seconds: float = 30,
        lease_name: str | None = None,
        max_interval: float = 5,
        touch_seconds: float = 3600,
        outage_backoff_max: float = 60,
        clock_jump_seconds: float = 5,
        retention_seconds: float = 7 * 86400,
        clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        ids = [spec.job_id for spec in specs]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate job ids: {sorted({i for i in ids if ids.count(i) > 1})}")
        self.specs = list(specs)
        self.emitter = emitter
        self.namespace = namespace
        self.cache = cache
        self.store = cacheio.records_in(cache)  # CacheMisconfigured for a backend that would unpickle
        self.using = using
        self.node = node or make_node_id()
        self.release = release
        self.fencing = fencing
        self.lease = Lease(lease_name or namespace, self.node, release, seconds=lease_seconds, using=using)
        self.max_interval = max_interval
        self.touch_interval = timedelta(seconds=touch_seconds)
        self.outage_backoff_max = outage_backoff_max
        self.clock_jump = clock_jump_seconds
        self.retention = timedelta(seconds=retention_seconds)
        self.clock = clock
        self.monotonic = _MONOTONIC if monotonic is None else monotonic
        self._memory: dict[str, tuple[str, Progress]] = {}  # job_id -> (sfp, progress)
        self._touched: dict[str, datetime] = {}
        self._outage_since: datetime | None = None
        self._outage_backoff = 0.0
        self._outage_retry_at: datetime | None = None
        self._last_clock: tuple[datetime, float] | None = None
        self._last_prune: float | None = None
        self._announced_invalid: set[str] = set()
        self._failing: dict[str, FailureStreak] = {}

    # --- the tick -----------------------------------------------------------------------------
    def tick(self, now: datetime | None = None) -> TickReport:
        plan = self.plan(now)
        if plan.report.db_error is None:
            self.enqueue(plan)
            self.advance(plan)
        return plan.report

    def plan(self, now: datetime | None = None) -> Plan:
        report = TickReport()
        try:
            now = self._now(now)
            report.now = now
            report.owner = self.lease.ensure() if self.fencing else False
        except Exception as exc:
            if not is_database_error(exc):
                raise
            return Plan(self._db_failed(report, exc, "lease"), [])
        report.writer = report.owner or not self.fencing
        plan = Plan(report, [])

        values, plan.records_read, plan.after_outage = self._read(now, report)
        for spec in self.specs:
            if plan.records_read:
                key_found = spec.key in values
                classified = repair.classify(spec, key_found, values.get(spec.key), now)
            else:
                classified = None
            plan.jobs.append(JobPlan(spec, classified, Progress(None, None)))

        try:
            self._recheck_implausible(plan, values, now)
            if report.owner and any(
                job.classified is not None and not job.classified.usable for job in plan.jobs
            ):
                # About to repair: make sure we still own the namespace first (a renewal is
                # throttled), so a just-demoted process never reports or counts a repair -- the
                # record it "sees" broken may simply be the new owner's.
                report.owner = self.lease.ensure(force=True)
                report.writer = report.owner
            self._resolve_progress(plan, now)
        except Exception as exc:
            if not is_database_error(exc):
                raise
            return Plan(self._db_failed(report, exc, "evidence"), [])

        for job in plan.jobs:
            job.due = repair.due(job.spec, job.progress, now)
            if job.due.dropped and report.writer:
                report.dropped[job.spec.job_id] = job.due.dropped
                metrics.inc("periodic_misfires", max(job.due.dropped, 1), namespace=self.namespace)
                self._log_job(
                    logging.WARNING,
                    "periodic.misfire_skipped",
                    "Job %(job_id)r skipped %(count)s occurrences from %(first)s: older than its misfire"
                    " grace of %(grace_s)s s.",
                    job.spec,
                    first=job.due.first_dropped,
                    count=job.due.dropped if job.due.dropped > 0 else "many",
                    grace_s=int(job.spec.misfire_grace.total_seconds()),
                    now=now,
                )
            if job.due.deferred and report.writer:
                metrics.inc("periodic_catch_up_overflow", len(job.due.deferred), namespace=self.namespace)
                self._log_job(
                    logging.WARNING,
                    "periodic.catch_up_capped",
                    "Job %(job_id)r has more missed occurrences than its catch-up cap of %(cap)s:"
                    " enqueuing %(enqueued)s now, %(deferred)s later.",
                    job.spec,
                    enqueued=len(job.due.keep),
                    deferred=len(job.due.deferred),
                    cap=job.spec.max_catch_up,
                )
        report.jobs = plan.jobs
        return plan

    def enqueue(self, plan: Plan) -> None:
        report = plan.report
        if not report.writer:
            return
        now = report.at()
        for job in plan.jobs:
            due = job.due
            if due is None:  # not planned: the plan failed before its due phase (it has no jobs)
                continue
            if not due.keep:
                job.result = due.after(job.spec, now, [], None)
                continue
            if report.fenced or report.db_error:
                continue
            streak = self._failing.get(job.spec.job_id)
            if streak is not None and now < streak.retry_at:
                report.retrying[job.spec.job_id] = streak.retry_at  # backing off: not even tried
                continue
            try:
                outcome = self.emitter.emit(self, job.spec, due.keep)
            except Fenced as exc:
                self._fenced(report, str(exc), job_id=job.spec.job_id)
                continue
            except Exception as exc:
                if is_database_error(exc):
                    self._db_failed(report, exc, "enqueue")
                    continue
                self._job_failed(job, report, f"{type(exc).__name__}: {exc}", due.keep[0])
                continue
            job.outcome = outcome
            if outcome.error is not None:
                self._job_failed(job, report, outcome.error, outcome.failed_at)
            else:
                self._job_recovered(job, report)
            if outcome.inserted:
                report.enqueued[job.spec.job_id] = list(outcome.inserted)
                metrics.inc("periodic_enqueued", len(outcome.inserted), namespace=self.namespace)
                for occurrence in outcome.inserted:
                    self._log_job(
                        logging.INFO,
                        "periodic.enqueued",
                        "Enqueued job %(job_id)r for its occurrence at %(occurrence)s.",
                        job.spec,
                        occurrence=occurrence,
                        node=self.node,
                    )
            if outcome.existing:
                report.existing[job.spec.job_id] = list(outcome.existing)
                metrics.inc("periodic_already_enqueued", len(outcome.existing), namespace=self.namespace)
                self._log_job(
                    logging.DEBUG,
                    "periodic.already_enqueued",
                    "Job %(job_id)r was already enqueued for %(occurrences)s: not enqueued again.",
                    job.spec,
                    occurrences=",".join(x.isoformat() for x in outcome.existing),
                )
            job.result = due.after(job.spec, now, outcome.done, outcome.failed_at)

    def _job_failed(self, job: JobPlan, report: TickReport, error: str, occurrence: datetime | None) -> None:
        """A failure that is not the database's (a payload the queue refuses, a broker that refuses
        the send ...): the occurrence stays due, and the job backs off -- 1 s, 2 s, 4 s ... up to
        ``max_interval`` -- instead of being retried on every tick. One ERROR per failure streak."""
        job.error = report.failed[job.spec.job_id] = error
        metrics.inc("periodic_enqueue_failures", namespace=self.namespace)
        now = report.at()
        streak = self._failing.get(job.spec.job_id)
        failures = 1 if streak is None else streak.failures + 1
        delay = min(self.max_interval, RETRY_FIRST_SECONDS * 2 ** min(failures - 1, 30))
        retry_at = now + timedelta(seconds=delay)
        report.retrying[job.spec.job_id] = retry_at
        if streak is None:
            self._failing[job.spec.job_id] = FailureStreak(now, retry_at, failures, error)
            self._log_job(
                logging.ERROR,
                getattr(self.emitter, "failure_event", "periodic.enqueue_failed"),
                "Job %(job_id)r failed to go out: %(error)s (%(action)s).",
                job.spec,
                occurrence=occurrence,
                error=error,
                node=self.node,
                action=("occurrence kept due; " if occurrence is not None else "")
                + f"retrying with back-off up to {self.max_interval:g}s, logged once until it succeeds",
            )
        else:
            streak.failures, streak.retry_at, streak.error = failures, retry_at, error
            self._log_job(
                logging.DEBUG,
                "periodic.enqueue_still_failing",
                "Job %(job_id)r still fails to enqueue (%(failures)s times; retrying in %(retry_in_s)s s):"
                " %(error)s",
                job.spec,
                failures=failures,
                retry_in_s=delay,
                error=error,
            )

    def _job_recovered(self, job: JobPlan, report: TickReport) -> None:
        streak = self._failing.pop(job.spec.job_id, None)
        if streak is not None:
            self._log_job(
                logging.INFO,
                getattr(self.emitter, "recovery_event", "periodic.enqueue_recovered"),
                "Job %(job_id)r enqueues again after %(failures)s failures over %(failing_s)s s.",
                job.spec,
                failures=streak.failures,
                node=self.node,
                failing_s=round((report.at() - streak.since).total_seconds(), 3),
                last_error=streak.error,
            )

    def advance(self, plan: Plan) -> None:
        report = plan.report
        for job in plan.jobs:
            view = job.result if job.result is not None else job.progress
            report.views[job.spec.job_id] = view
            if job.result is not None and report.writer:
                self._remember(job.spec, job.result)
        if not (report.writer and plan.records_read) or report.fenced or report.db_error:
            self._schedule_sleep(plan)
            return
        now = report.at()
        writes: dict[str, tuple[dict[str, Any], int]] = {}
        touches: list[JobPlan] = []
        for job in plan.jobs:
            if job.result is None:
                continue
            record = Record(
                job.spec.job_id, job.spec.sfp, job.spec.dfp, job.result, self.node, self.release, now
            )
            current = job.classified.usable_record if job.classified else None
            if job.repaired or not record.same_progress(current):
                writes[job.spec.key] = (record.encode(), job.spec.ttl)
            elif current is not None:
                touched = max(
                    [x for x in (current.at, self._touched.get(job.spec.job_id)) if x], default=None
                )
                if touched is None or now - touched >= self.touch_interval:
                    touches.append(job)
        if (writes or touches) and self.fencing and not self._still_owner(report):
            self._schedule_sleep(plan)
            return
        try:
            if writes:
                self.store.write_many(writes)
                report.written = [job.spec.job_id for job in plan.jobs if job.spec.key in writes]
                for job_id in report.written:
                    self._touched[job_id] = now
            for job in touches:
                self.store.touch(job.spec.key, job.spec.ttl)
                self._touched[job.spec.job_id] = now
                report.touched.append(job.spec.job_id)
                metrics.inc("periodic_touches", namespace=self.namespace)
        except cacheio.CacheUnavailable as exc:
            self._cache_failed(now, exc, report)
        except Exception as exc:
            # A write that fails (not an outage): serve the in-memory view, retry next tick.
            report.write_error = f"{type(exc).__name__}: {exc}"
            metrics.inc("periodic_cache_errors", namespace=self.namespace, op="write")
            log_event(
                logger,
                logging.ERROR,
                "periodic.record_write_failed",
                "Could not write the periodic records of %(jobs)s (serving them from memory; retrying"
                " next tick): %(error)s",
                namespace=self.namespace,
                jobs=",".join(sorted(j.spec.job_id for j in plan.jobs if j.spec.key in writes)) or "-",
                error=report.write_error,
                node=self.node,
            )
        self._schedule_sleep(plan)
        self._maybe_prune(now)

    # --- progress ------------------------------------------------------------------------------
    def _recheck_implausible(self, plan: Plan, values: dict[str, Any], now: datetime) -> None:
        """A record ahead of ``now`` may be honest: written by a node whose clock runs ahead, which
        enqueued that far. Postgres knows (the last occurrence enqueued): judge it again with that."""
        suspects = [
            job
            for job in plan.jobs
            if job.classified is not None and job.classified.state == records.IMPLAUSIBLE
        ]
        if not suspects:
            return
        evidence = self._evidence([job.spec.job_id for job in suspects])
        for job in suspects:
            job.classified = repair.classify(
                job.spec, True, values[job.spec.key], now, evidence.get(job.spec.job_id)
            )

    def _resolve_progress(self, plan: Plan, now: datetime) -> None:
        report = plan.report
        need_evidence: list[JobPlan] = []
        for job in plan.jobs:
            memory = self._memory.get(job.spec.job_id)
            remembered = memory[1] if memory and memory[0] == job.spec.sfp else None
            classified = job.classified
            usable = classified.usable_record if classified is not None else None
            if classified is not None and usable is not None:
                progress = usable.progress
                if remembered is not None:
                    progress = progress.advanced(remembered)
                job.progress = progress
                if classified.state == records.STALE_DEFINITION and report.writer:
                    report.stale_definitions.append(job.spec.job_id)
                    self._log_job(
                        logging.INFO,
                        "periodic.definition_changed",
                        "The declaration of job %(job_id)r changed since its record was written: %(detail)s",
                        job.spec,
                        key=job.spec.key,
                        detail=classified.detail,
                        node=self.node,
                    )
            elif classified is None and remembered is not None:
                job.progress = remembered  # degraded mode: our own memory is exact for our writes
            else:
                need_evidence.append(job)
        if not need_evidence:
            return
        evidence = self._evidence([job.spec.job_id for job in need_evidence])
        for job in need_evidence:
            reason = job.classified.state if job.classified is not None else records.MISSING
            progress, source = repair.rebuild(job.spec, reason, now, evidence.get(job.spec.job_id))
            memory = self._memory.get(job.spec.job_id)
            if memory and memory[0] == job.spec.sfp and reason != records.SCHEDULE_CHANGED:
                merged = progress.advanced(memory[1])
                if merged != progress:  # this process knows more than the evidence (e.g. skip policy)
                    progress, source = merged, "memory"
            job.progress = progress
            job.source = source
            if job.classified is None:
                continue  # degraded: not a repair, the records were not read
            job.repaired = reason
            self._report_repair(job, job.classified, reason, plan)

    def _report_repair(self, job: JobPlan, classified: Classified, reason: str, plan: Plan) -> None:
        report = plan.report
        spec = job.spec
        prior = classified.record.progress.last if classified.record else None
        if not report.writer:
            # A non-owner serves the rebuilt view and writes nothing; the owner reports the repair.
            self._log_job(
                logging.DEBUG,
                "periodic.view_rebuilt",
                "Rebuilt this process's view of job %(job_id)r (record %(reason)s); its owner repairs it.",
                spec,
                reason=reason,
                key=spec.key,
                node=self.node,
            )
            return
        if reason == records.MISSING and job.progress.last is None and job.source == "declaration":
            # No record, and Postgres has never enqueued the job: a new job's first record, which
            # is no repair (not logged, counted or signalled as one).
            report.created.append(spec.job_id)
            self._log_job(
                logging.INFO,
                "periodic.record_created",
                "Wrote the first record of periodic job %(job_id)r: next occurrence %(next)s.",
                spec,
                key=spec.key,
                node=self.node,
                release=self.release,
                next=job.progress.next,
            )
            return
        report.repairs.append((spec.job_id, reason, job.source))
        after_outage = plan.after_outage
        # An expected repair is INFO: a schedule change that follows a deploy (another release
        # wrote the record).
        deploy = (
            reason == records.SCHEDULE_CHANGED
            and classified.record is not None
            and classified.record.release != self.release
        )
        level = logging.INFO if deploy else logging.WARNING
        self._log_job(
            level,
            "periodic.record_repaired",
            "Repaired the periodic record of job %(job_id)r (%(reason)s, rebuilt from %(source)s):"
            " next occurrence %(next)s.",
            spec,
            reason=reason,
            key=spec.key,
            node=self.node,
            release=self.release,
            owner=report.owner,
            prior_last=prior,
            source=job.source,
            after_outage=after_outage,
            detail=classified.detail,
            last=job.progress.last,
            next=job.progress.next,
        )
        metrics.inc("periodic_repairs", namespace=self.namespace, reason=reason)
        try:
            store.count_repair(self.namespace, spec.job_id, reason, using=self.using)
        except Exception as exc:  # the durable counter is best effort
            if not is_database_error(exc):
                raise
            log_event(
                logger,
                logging.DEBUG,
                "periodic.repair_count_failed",
                "Could not count the repair of job %(job_id)r: %(error)s",
                job_id=spec.job_id,
                error=str(exc),
            )
        signals.record_repaired.send(
            sender=type(self),
            job_id=spec.job_id,
            reason=reason,
            namespace=self.namespace,
            source=job.source,
            after_outage=after_outage,
            key=spec.key,
        )

    def _evidence(self, job_ids: list[str]) -> dict[str, datetime]:
        """The last occurrence enqueued of each job, from the database it enqueues on."""
        grouped: dict[str, list[str]] = {}
        for job_id in job_ids:
            grouped.setdefault(self._database_of(job_id), []).append(job_id)
        found: dict[str, datetime] = {}
        for alias, ids in grouped.items():
            found.update(store.last_occurrences(self.namespace, ids, using=alias))
        return found

    def _database_of(self, job_id: str) -> str:
        """Where a job's occurrence rows live: its queue's database for a declared job, the
        scheduler's own otherwise (a Celery beat entry)."""
        from runnerq_django.scheduler.declarations import PeriodicJob

        for spec in self.specs:
            if spec.job_id == job_id and isinstance(spec.source, PeriodicJob):
                try:
                    return spec.source.database()
                except Exception:  # a target that no longer resolves: its tick reports it
                    break
        return self.using

    def _remember(self, spec: JobSpec, progress: Progress) -> None:
        self._memory[spec.job_id] = (spec.sfp, progress)

    # --- the cache -----------------------------------------------------------------------------
    def _read(self, now: datetime, report: TickReport) -> tuple[dict[str, Any], bool, bool]:
        """``(values, read_ok, after_outage)``."""
        if (
            self._outage_since is not None
            and self._outage_retry_at is not None
            and now < self._outage_retry_at
        ):
            report.degraded = True
            return {}, False, False
        try:
            values = self.store.read_many([spec.key for spec in self.specs])
        except cacheio.CacheUnavailable as exc:
            self._cache_failed(now, exc, report)
            return {}, False, False
        after_outage = False
        if self._outage_since is not None:
            after_outage = True
            self.log(
                logging.WARNING,
                "periodic.cache_recovered",
                "The scheduler's cache answers again after %(outage_s)s s; periodic records are written again.",
                outage_s=round((now - self._outage_since).total_seconds(), 3),
            )
            self._outage_since = self._outage_retry_at = None
            self._outage_backoff = 0.0
            metrics.gauge("periodic_cache_degraded", 0, namespace=self.namespace)
        return values, True, after_outage

    def _cache_failed(self, now: datetime, exc: BaseException, report: TickReport) -> None:
        report.degraded = True
        metrics.inc("periodic_cache_errors", namespace=self.namespace, op="outage")
        if self._outage_since is None:
            self._outage_since = now
            self._outage_backoff = 1.0
            metrics.gauge("periodic_cache_degraded", 1, namespace=self.namespace)
            # One ERROR per outage; the retries that follow back off quietly.
            self.log(
                logging.ERROR,
                "periodic.cache_unavailable",
                "The scheduler's cache is unavailable (%(error)s): %(mode)s.",
                error=str(exc),
                mode="degraded: enqueuing from declarations and Postgres, no record writes",
            )
        else:
            self._outage_backoff = min(self._outage_backoff * 2, self.outage_backoff_max)
            log_event(
                logger,
                logging.DEBUG,
                "periodic.cache_still_unavailable",
                "The scheduler's cache is still unavailable; trying again in %(retry_in_s)s s.",
                namespace=self.namespace,
                retry_in_s=self._outage_backoff,
            )
        self._outage_retry_at = now + timedelta(seconds=self._outage_backoff)

    @property
    def degraded(self) -> bool:
        return self._outage_since is not None

    def _still_owner(self, report: TickReport) -> bool:
        try:
            if self.lease.still_owner():
                return True
        except Exception as exc:
            if not is_database_error(exc):
                raise
            self._db_failed(report, exc, "fence")
            return False
        self._fenced(report, "lease moved before the record write; records left to the new owner")
        return False

    def log(self, level: int, event: str, sentence: str, **facts: Any) -> None:
        """Log ``event`` about this scheduler (its namespace and node first)."""
        log_event(logger, level, event, sentence, namespace=self.namespace, node=self.node, **facts)

    def _log_job(self, level: int, event: str, sentence: str, spec: JobSpec, **facts: Any) -> None:
        """Log ``event`` about one job (its id first)."""
        log_event(logger, level, event, sentence, job_id=spec.job_id, **facts)

    def _fenced(self, report: TickReport, detail: str, *, job_id: str | None = None) -> None:
        """Another process owns the namespace now: stop enqueueing and writing this tick."""
        report.fenced = True
        metrics.inc("periodic_fenced", namespace=self.namespace)
        where = {} if job_id is None else {"job_id": job_id}
        log_event(
            logger,
            logging.WARNING,
            "periodic.fenced",
            "Another scheduler owns the periodic jobs now; this one stops enqueueing: %(detail)s.",
            **where,
            node=self.node,
            detail=detail,
        )
        self.lease.demote()
        report.owner = report.writer = False

    # --- clocks, sleeping, errors ------------------------------------------------------------
    def _now(self, now: datetime | None) -> datetime:
        explicit = now is not None
        if now is None:
            now = self.clock() if self.clock is not None else db_now(self.using)
        mono = self.monotonic()
        if not explicit and self._last_clock is not None:
            wall_delta = (now - self._last_clock[0]).total_seconds()
            mono_delta = mono - self._last_clock[1]
            if abs(wall_delta - mono_delta) > self.clock_jump:
                metrics.inc("periodic_clock_jumps", namespace=self.namespace)
                log_event(
                    logger,
                    logging.WARNING,
                    "periodic.clock_jump",
                    "The clock jumped by %(jump_s)s s (wall %(wall_s)s s against monotonic"
                    " %(monotonic_s)s s).",
                    node=self.node,
                    wall_s=round(wall_delta, 3),
                    monotonic_s=round(mono_delta, 3),
                    jump_s=round(wall_delta - mono_delta, 3),
                )
        self._last_clock = (now, mono)
        return now

    def _schedule_sleep(self, plan: Plan) -> None:
        """Until the earliest next occurrence, at most ``max_interval`` (a non-owner only needs
        to look at the lease now and then)."""
        report = plan.report
        sleep = self.max_interval
        if report.writer:
            for job_id, view in report.views.items():
                if view.next is None:
                    continue
                wake = view.next
                streak = self._failing.get(job_id)
                if streak is not None and streak.retry_at > wake:
                    wake = streak.retry_at  # a failing job's due occurrence waits for its retry time
                sleep = min(sleep, max(0.0, (wake - report.at()).total_seconds()))
        report.sleep = sleep

    def _db_failed(self, report: TickReport, exc: BaseException, where: str) -> TickReport:
        from django.db import connections

        report.db_error = f"{where}: {type(exc).__name__}: {exc}"
        self.log(
            logging.ERROR,
            "periodic.database_unavailable",
            "The database failed during the %(during)s step (%(error)s): %(action)s.",
            during=where,
            error=f"{type(exc).__name__}: {exc}".strip(),
            action="records not advanced; retry next tick",
        )
        try:
            connection = connections[self.using]
            if not connection.in_atomic_block:
                connection.close()  # the next tick reconnects
        except Exception:  # pragma: no cover - closing a dead connection may raise
            pass
        report.sleep = min(self.max_interval, 1.0)
        return report

    def _maybe_prune(self, now: datetime) -> None:
        mono = self.monotonic()
        if self._last_prune is not None and mono - self._last_prune < PRUNE_EVERY.total_seconds():
            return
        self._last_prune = mono
        grace = max([spec.misfire_grace for spec in self.specs], default=timedelta(0))
        before = now - max(self.retention, 2 * grace + timedelta(days=1))
        aliases = dict.fromkeys([self.using, *(self._database_of(spec.job_id) for spec in self.specs)])
        for alias in aliases:
            try:
                store.prune_occurrences(self.namespace, before, batch=PRUNE_BATCH, using=alias)
            except Exception as exc:
                if not is_database_error(exc):
                    raise
                log_event(
                    logger,
                    logging.DEBUG,
                    "periodic.prune_failed",
                    "Could not prune old periodic occurrences on %(database)r: %(error)s",
                    database=alias,
                    error=str(exc),
                )

    def close(self) -> None:
        """Give the lease up so another process takes over at once."""
        if not self.fencing:
            return
        try:
            self.lease.release()
        except Exception as exc:
            if not is_database_error(exc):
                raise
