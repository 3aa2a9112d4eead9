"""The read-only view of every declared job: record state, last/next, owner, repair counts.

Used by ``manage.py runnerq_schedule`` and the admin. It never writes: one raw read of the
records as JSON text (``cacheio``: nothing is unpickled; no ``set``, no ``touch``, no repair) and
``SELECT``s in Postgres. A record that can't be used (forged progress included) is shown with its
reason and a view derived from the declaration and the Postgres evidence, exactly what the owner
would rebuild at its next tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from runnerq_django.scheduler import cacheio, declarations, records, repair
from runnerq_django.scheduler.fencing import read_lease
from runnerq_django.scheduler.records import Progress
from runnerq_django.storage.periodic import LeaseState

if TYPE_CHECKING:
    from django.core.cache.backends.base import BaseCache


@dataclass(frozen=True)
class JobState:
    id: str
    key: str
    schedule: str
    state: str  # present / missing / unreadable / schema / schedule_changed / implausible /
    #             stale_definition / cache_unavailable / invalid (a declaration the scheduler does not run)
    detail: str
    last: datetime | None
    next: datetime | None
    source: str  # record / db_evidence / declaration
    last_enqueued: datetime | None  # Postgres evidence
    owner: str | None
    owner_release: int | None
    lease_expires_at: datetime | None
    lease_expired: bool
    repairs: dict[str, int] = field(default_factory=dict)
    written_by: str | None = None
    written_at: datetime | None = None

    @property
    def repair_total(self) -> int:
        return sum(self.repairs.values())


class _LeaseFields(TypedDict):
    """The lease's part of every :class:`JobState` (one lease per namespace)."""

    owner: str | None
    owner_release: int | None
    lease_expires_at: datetime | None
    lease_expired: bool


def job_states(
    jobs: list[declarations.PeriodicJob] | None = None,
    *,
    namespace: str | None = None,
    cache: BaseCache | None = None,
    using: str | None = None,
    now: datetime | None = None,
) -> list[JobState]:
    """One :class:`JobState` per declared job, in declaration order, including the declarations
    the scheduler does not run (state ``invalid``, the problems in ``detail``). Writes nothing."""
    from runnerq_django import conf
    from runnerq_django.scheduler.repair import spec_for
    from runnerq_django.scheduler.tick import db_now
    from runnerq_django.storage import periodic as store

    options = conf.get("SCHEDULER")
    namespace = namespace or options["NAMESPACE"]
    using = using or conf.database_alias()
    if jobs is None:  # the declared jobs, then the schedules kept in Postgres
        from runnerq_django.scheduler.rows import runtime_jobs

        jobs = [*declarations.declared_jobs(), *runtime_jobs(using=using)]
    declared = list(jobs)
    runnable, skipped = declarations.partition(declared)
    invalid = {id(item.job): item.reason for item in skipped}
    specs = {id(job): spec_for(job, namespace) for job in runnable}
    now = now or db_now(using)

    values: dict[str, Any] = {}
    cache_error: str | None = None
    try:
        if specs:  # no runnable job, no cache needed (a project without periodic jobs may have no alias)
            saved = cacheio.records_in(cache) if cache is not None else cacheio.alias_records()
            values = saved.read_many([spec.key for spec in specs.values()])
    except (cacheio.CacheUnavailable, cacheio.CacheMisconfigured) as exc:
        values, cache_error = {}, str(exc)

    lease: LeaseState = read_lease(namespace, using)
    evidence: dict[str, Any] = {}
    for alias, on_alias in _by_database(declared, using).items():
        evidence.update(store.last_occurrences(namespace, on_alias, using=alias))
    counts = store.repair_counts(namespace, using=using)
    lease_fields = _LeaseFields(
        owner=lease.owner,
        owner_release=lease.release,
        lease_expires_at=lease.expires_at,
        lease_expired=lease.expired,
    )

    states: list[JobState] = []
    for job in declared:
        if id(job) in invalid:
            job_id = job.id if isinstance(job.id, str) else repr(job.id)
            states.append(
                JobState(
                    id=job_id,
                    key=records.key_for(namespace, f"job:{job_id}"),
                    schedule=_describe(job),
                    state="invalid",
                    detail=invalid[id(job)],
                    last=None,
                    next=None,
                    source="declaration",
                    last_enqueued=evidence.get(job_id),
                    repairs=counts.get(job_id, {}),
                    **lease_fields,
                )
            )
            continue
        spec = specs.get(id(job))
        if spec is None:
            continue  # disabled in code
        written_by: str | None = None
        written_at: datetime | None = None
        record: records.Record | None
        if cache_error is not None:
            state, detail, record = "cache_unavailable", cache_error, None
        else:
            classified = repair.classify(
                spec, spec.key in values, values.get(spec.key), now, evidence.get(spec.job_id)
            )
            state, detail, record = classified.state, classified.detail, classified.record
        if record is not None and state in ("present", "stale_definition"):
            progress, source = record.progress, "record"
            written_by, written_at = record.node, record.at
        else:
            reason = state if state != "cache_unavailable" else "missing"
            progress, source = repair.rebuild(spec, reason, now, evidence.get(spec.job_id))
        states.append(
            JobState(
                id=spec.job_id,
                key=spec.key,
                schedule=spec.schedule.describe(),
                state=state,
                detail=detail,
                last=progress.last,
                next=progress.next,
                source=source,
                last_enqueued=evidence.get(spec.job_id),
                repairs=counts.get(spec.job_id, {}),
                written_by=written_by,
                written_at=written_at,
                **lease_fields,
            )
        )
    return states


def _describe(job: declarations.PeriodicJob) -> str:
    """The schedule of a declaration that may not even evaluate."""
    try:
        return job.schedule.describe()
    except Exception:
        return f"cron {job.cron!r}" if job.cron is not None else f"every {job.every!r}"


__all__ = ["JobState", "Progress", "job_states"]


def _by_database(declared: list[declarations.PeriodicJob], home: str) -> dict[str, list[str]]:
    """The declared jobs' ids by the database their occurrences are on (their queue's)."""
    grouped: dict[str, list[str]] = {home: []}
    for job in declared:
        if isinstance(job.id, str):
            try:
                alias = job.database()
            except Exception:  # a target that does not resolve: reported as invalid
                alias = home
            grouped.setdefault(alias, []).append(job.id)
    return {alias: ids for alias, ids in grouped.items() if ids}
