"""One scheduler for both kinds: declared jobs and the schedules kept in Postgres.

:class:`RuntimeCore` is the tick machinery (``tick.SchedulerCore``) whose list of jobs is the
declared jobs plus the enabled rows of ``runnerq_schedules``, enumerated from Postgres the way
declarations are enumerated from code. Everything else is the design brief's model unchanged:
one cache record per schedule (``periodic:v1:{namespace}:job:{id}``), read-repair against the
row, the idempotency key ``periodic:{namespace}:{id}:{occurrence}`` per nominal instant.

- **Seeing changes.** Before each tick's plan, one cheap query,
  ``SELECT count(*), max(change_seq)``, tells whether any row was created, changed or deleted
  (the database bumps ``change_seq`` with every revision). Only then are the ids and their
  ``change_seq`` read, and only the rows that changed read whole and rebuilt into jobs. A change
  takes effect at the next tick, without a restart.
- **Timing changes** move the row's floor (``timing_changed_at``): the new timing starts at the
  change, so nothing before it is enqueued, and the schedule fingerprint changes, so the record
  written for the old timing is rebuilt (``periodic.record_repaired reason=schedule_changed``,
  by the owner only) from Postgres: nothing at or before the last enqueued occurrence is
  enqueued again, and an instant both timings share keeps its idempotency key.
- **Other changes** (payload, queue, pause and resume ...) keep the schedule fingerprint: the
  record's progress stays and its definition fingerprint (which covers the revision) is
  rewritten. A paused schedule is not planned; resumed, its held occurrences go through the
  misfire policy like any late occurrence (grace, coalesce, ``max_catch_up``).
- **The enqueue** of a row's occurrences locks the row first (``FOR UPDATE``, in the same
  transaction as the guard rows and the activities): a row deleted, paused or changed since the
  tick read it holds its occurrences for the next tick, which plans them from the row as it is
  now; the cap on occurrences is counted there too, so two schedulers never exceed it.
- **Id clashes**: a row whose id a declared job has is not run (the declaration is), logged once
  (``periodic.schedule_skipped``) and reported by ``manage.py check`` (``runnerq.E106``).

Internal: not part of the public API.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from runnerq_django.logs import log_event
from runnerq_django.scheduler.enqueue import ActivityEmitter, Core, EmitOutcome
from runnerq_django.scheduler.repair import JobSpec, spec_for
from runnerq_django.scheduler.rows import RowJob, job_of
from runnerq_django.scheduler.tick import Plan, SchedulerCore, TickReport, is_database_error
from runnerq_django.storage import schedules as store

if TYPE_CHECKING:
    from runnerq_django.scheduler.declarations import PeriodicJob
    from runnerq_django.scheduler.schedules import Schedule

logger = logging.getLogger("runnerq_django.scheduler")


@lru_cache(maxsize=4096)
def _longest_period(schedule: Schedule) -> timedelta:
    return schedule.longest_period()


def row_spec(job: RowJob, namespace: str) -> JobSpec:
    """The tick's view of a row's job (``repair.spec_for``'s, with the TTL's period memoized per
    timing: ten thousand rows share a few cron expressions)."""
    inner = getattr(job.schedule, "inner", job.schedule)
    return spec_for(job, namespace, longest_period=_longest_period(inner))


def _no_table(error: BaseException) -> bool:
    """The table of runtime schedules does not exist (SQLSTATE 42P01), anywhere in the chain."""
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "sqlstate", None) == "42P01":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class RowEmitter(ActivityEmitter):
    """Enqueues a row's occurrences under a lock on the row (see the module docstring)."""

    def delay_of(self, job: PeriodicJob, occurrence: datetime) -> datetime | None:
        if isinstance(job, RowJob) and job.jitter:
            return occurrence + job.jitter_for(occurrence)
        return None

    def emit(self, core: Core, spec: JobSpec, occurrences: list[datetime]) -> EmitOutcome:
        from django.db import transaction

        job = spec.source
        if not isinstance(job, RowJob):
            return super().emit(core, spec, occurrences)
        with transaction.atomic(using=core.using):
            row = store.lock(job.id, using=core.using)
            if row is None or not row[1] or row[0] != job.revision:
                # Deleted, paused or changed since this tick read it: held for the next tick.
                log_event(
                    logger,
                    logging.DEBUG,
                    "periodic.schedule_moved",
                    "Schedule %(job_id)r changed while its occurrences were due; the next tick plans them"
                    " from the row as it is now.",
                    job_id=job.id,
                    read_revision=job.revision,
                    revision=row[0] if row else None,
                )
                return EmitOutcome(failed_at=occurrences[0])
            count, cap = row[2], row[3]
            allowed = occurrences if cap is None else occurrences[: max(0, cap - count)]
            outcome = super().emit(core, spec, allowed) if allowed else EmitOutcome()
            if outcome.inserted:
                store.count_occurrences(job.id, len(outcome.inserted), using=core.using)
            return outcome


class RuntimeCore(SchedulerCore):
    """A :class:`~runnerq_django.scheduler.tick.SchedulerCore` that also runs the enabled rows of
    ``runnerq_schedules``, re-read whenever they change (see the module docstring)."""

    def __init__(self, specs: list[JobSpec], emitter: Any = None, **options: Any) -> None:
        super().__init__(specs, emitter if emitter is not None else RowEmitter(), **options)
        self.declared_specs = list(specs)
        self._version: tuple[int, int] | None = None
        self._rows: dict[str, tuple[int, JobSpec | None]] = {}  # id -> (change_seq, spec or None)
        self._announced: set[tuple[str, int]] = set()
        self._rows_failing = False
        self._index: dict[str, JobSpec] = {}
        self._index_of: list[JobSpec] | None = None
        self._listening: Any = None  # the psycopg session that listens

    def plan(self, now: datetime | None = None) -> Plan:
        try:
            self.refresh_rows()
        except Exception as exc:  # the database failed: this tick advances nothing, like any step
            if not is_database_error(exc):
                raise
            return Plan(self._db_failed(TickReport(), exc, "schedules"), [])
        return super().plan(now)

    def refresh_rows(self) -> bool:
        """Re-read the rows if any changed (one cheap query otherwise). True when they were."""
        try:
            version = store.version(using=self.using)
            if version == self._version:
                return False
            current = store.enabled_seqs(using=self.using)
        except Exception as exc:
            if not _no_table(exc):
                raise  # the database failing: plan() makes it this tick's failure
            # Not migrated yet (0009): the declared jobs run; said once.
            if not self._rows_failing:
                self._rows_failing = True
                self.log(
                    logging.ERROR,
                    "periodic.schedules_unreadable",
                    "Could not read the runtime schedules (%(error)s): %(action)s.",
                    error=f"{type(exc).__name__}: {exc}",
                    action="running the declared jobs only; run manage.py migrate",
                )
            return False
        self._rows_failing = False
        changed = [row_id for row_id, seq in current.items() if self._rows.get(row_id, (None,))[0] != seq]
        kept = {
            row_id: entry
            for row_id, entry in self._rows.items()
            if row_id in current and row_id not in changed
        }
        if changed:
            from runnerq_django.models import RuntimeSchedule

            for row in RuntimeSchedule.objects.using(self.using).filter(pk__in=changed, enabled=True):
                kept[row.id] = (row.change_seq, self._spec_of(row))
        self._rows = kept
        self._version = version
        declared = {spec.job_id for spec in self.declared_specs}
        self.specs = self.declared_specs + [
            spec for _, (_, spec) in sorted(kept.items()) if spec is not None and spec.job_id not in declared
        ]
        return True

    def _spec_of(self, row: Any) -> JobSpec | None:
        job = job_of(row)
        declared = {spec.job_id for spec in self.declared_specs}
        problems = job.validate()
        if row.id in declared:
            problems = [f"id {row.id!r} is also a job declared in code, which runs instead (runnerq.E106)"]
        if problems:
            if (row.id, row.revision) not in self._announced:
                self._announced.add((row.id, row.revision))
                log_event(
                    logger,
                    logging.ERROR,
                    "periodic.schedule_skipped",
                    "Schedule %(job_id)r (revision %(revision)s) is not scheduled: %(reason)s.",
                    job_id=row.id,
                    revision=row.revision,
                    reason="; ".join(problems),
                    action="not scheduled until it is changed",
                )
            return None
        return row_spec(job, self.namespace)

    # --- waking on a change ------------------------------------------------------------------
    def wait(self, stop_event: threading.Event, seconds: float) -> None:
        """Sleep until the next tick: ``seconds``, or less when a schedule changes (``LISTEN
        runnerq_schedules`` on this scheduler's own session, when ``RUNNERQ['LISTEN']`` is on;
        the trigger announces every change). Without it, the change check at the next tick."""
        from runnerq_django import conf

        session = self._listening_session() if conf.runnerq_settings().listen else None
        if session is None:
            stop_event.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        try:
            while not stop_event.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                woken = False
                for _ in session.notifies(timeout=min(remaining, 0.5), stop_after=1):
                    woken = True
                    break  # (the generator holds the session's lock until it ends)
                if woken:
                    list(session.notifies(timeout=0))  # one tick for a burst of changes
                    return
        except Exception as exc:  # the session broke: the next tick reconnects; poll meanwhile
            self._listening = None
            log_event(
                logger,
                logging.DEBUG,
                "periodic.schedules_listen_lost",
                "Stopped listening for schedule changes (%(error)s); the change check still runs every tick.",
                error=f"{type(exc).__name__}: {exc}",
            )
            stop_event.wait(max(0.0, deadline - time.monotonic()))

    def _listening_session(self) -> Any:
        """This scheduler's session, listening on ``runnerq_schedules`` (None if it can't)."""
        from django.db import connections

        connection = connections[self.using]
        try:
            connection.ensure_connection()
            raw = connection.connection
            if raw is None or raw.closed:
                return None
            if raw is not self._listening:
                self._listening = store.listen(using=self.using)
            return raw
        except Exception:
            self._listening = None
            return None

    def _database_of(self, job_id: str) -> str:
        """The base class looks the job up in its list; with thousands of rows, a dict."""
        from runnerq_django.scheduler.declarations import PeriodicJob

        if self._index_of is not self.specs:
            self._index = {spec.job_id: spec for spec in self.specs}
            self._index_of = self.specs
        spec = self._index.get(job_id)
        if spec is not None and isinstance(spec.source, PeriodicJob):
            try:
                return spec.source.database()
            except Exception:  # a target that no longer resolves: its tick reports it
                return self.using
        return self.using


__all__ = ["RowEmitter", "RuntimeCore", "row_spec"]
