"""Enqueueing occurrences: the occurrence guard row and the activity, in one transaction.

The transaction of one job's due occurrences (``storage.periodic.enqueue_occurrences``):

1. the fencing check (``FOR SHARE`` on the lease row where owner and token are ours), when
   fencing is on -- a takeover either happened before (we are refused) or waits for our commit;
2. per occurrence, ``INSERT ... ON CONFLICT (idempotency_key) DO NOTHING RETURNING`` into
   ``runnerq_periodic_occurrences``: a row back means this process enqueues the occurrence, none
   means another scheduler (or an earlier tick) already did;
3. for a claimed occurrence, ``storage.submit`` of the activity with the application
   idempotency key ``periodic:{namespace}:{job_id}:{occurrence}`` and ``return_existing``, so
   even a pruned guard row cannot produce a second activity.

Steps 2 and 3 run on the database of the job's queue (``routing.database_for``;
``RUNNERQ['QUEUE_DATABASES']``), so the guard row and the activity still commit together and a
job's occurrences are always guarded in one place. The lease stays on the scheduler's database;
for a job on another one, the fencing check holds the lease row until the occurrences commit.

The cache record is advanced only after this commits (enqueue first, then advance): a crash in
between makes the next tick enqueue the same keys again, which changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from runnerq_django.scheduler.schedules import format_instant

if TYPE_CHECKING:
    from runnerq_django.scheduler.declarations import PeriodicJob
    from runnerq_django.scheduler.fencing import Lease
    from runnerq_django.scheduler.repair import JobSpec


def idempotency_key(namespace: str, job_id: str, occurrence: datetime) -> str:
    return f"periodic:{namespace}:{job_id}:{format_instant(occurrence)}"


@dataclass
class EmitOutcome:
    inserted: list[datetime] = field(default_factory=list)
    existing: list[datetime] = field(default_factory=list)
    failed_at: datetime | None = None  # first occurrence not enqueued (later ones weren't tried)
    error: str | None = None  # why ``failed_at`` was not enqueued (the core backs the job off)

    @property
    def done(self) -> list[datetime]:
        return sorted(self.inserted + self.existing)


class Core(Protocol):
    """What an emitter reads of the scheduler core that calls it (``tick.SchedulerCore``, which
    imports this module): whose occurrences they are, and the lease that fences the enqueue."""

    namespace: str
    node: str
    using: str
    fencing: bool
    lease: Lease


class Emitter(Protocol):
    """What the tick hands a job's due occurrences to (``failure_event`` and ``recovery_event``,
    optional, name the log events of a failure streak)."""

    def emit(self, core: Core, spec: JobSpec, occurrences: list[datetime]) -> EmitOutcome: ...


class ActivityEmitter:
    """Enqueues a declared job's occurrences as RunnerQ activities."""

    # Log events of a failure streak (one ERROR when it starts, one line when it ends).
    failure_event = "periodic.enqueue_failed"
    recovery_event = "periodic.enqueue_recovered"

    def delay_of(self, job: PeriodicJob, occurrence: datetime) -> datetime | None:
        """When an occurrence's activity may run, if not at once (a runtime schedule's jitter)."""
        return None

    def emit(self, core: Core, spec: JobSpec, occurrences: list[datetime]) -> EmitOutcome:
        from runnerq_django import client, routing
        from runnerq_django.observability import tracing
        from runnerq_django.scheduler.declarations import PeriodicJob
        from runnerq_django.storage import periodic as store
        from runnerq_django.storage.types import NewActivity, SubmitResult

        job = spec.source
        if not isinstance(job, PeriodicJob):
            raise TypeError(f"job {spec.job_id!r}: an ActivityEmitter enqueues declared jobs, not {job!r}")
        target = job.handler() or job.activity_type()
        built: list[tuple[datetime, str, str, NewActivity]] = []
        for occurrence in occurrences:
            key = idempotency_key(core.namespace, spec.job_id, occurrence)
            queue, new = client.build_activity(
                target,
                job.payload,
                queue=job.queue,
                priority=job.priority,
                idempotency_key=key,
                delay=self.delay_of(job, occurrence),
                metadata={
                    "periodic_namespace": core.namespace,
                    "periodic_job": spec.job_id,
                    "periodic_occurrence": format_instant(occurrence),
                },
            )
            built.append((occurrence, key, queue, new))
        outcome = EmitOutcome()
        if not built:
            return outcome
        fence = core.lease.fence if core.fencing else None
        # A producer span per occurrence (tracing on), its context in the activity's metadata.
        with tracing.sending(built[0][2], [new for *_, new in built]) as send:
            items = [
                store.Occurrence(occurrence, key, queue, new)
                for (occurrence, key, queue, _), new in zip(built, send.activities)
            ]
            enqueued = store.enqueue_occurrences(
                core.namespace,
                spec.job_id,
                items,
                node=core.node,
                fence=fence,
                fence_using=core.using,
                using=routing.database_for(built[0][2]),
            )
            send.done(
                [
                    SubmitResult(d.activity_id or new.id, d.created)
                    for d, new in zip(enqueued, send.activities)
                ]
            )
        for done in enqueued:
            (outcome.inserted if done.created else outcome.existing).append(done.occurrence)
        return outcome
