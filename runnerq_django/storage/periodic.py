"""Storage operations of the periodic scheduler: the lease, the occurrence guard, the evidence a
repair rebuilds progress from, and the durable repair counts.

The tables are the scheduler's own (``runnerq_periodic_lease``, ``runnerq_periodic_occurrences``,
``runnerq_periodic_repairs``); the activity itself goes through :func:`storage.submit`. Like the
other storage modules, every operation runs on the Django connection of ``RUNNERQ['DATABASE']``
(or ``using``), is one transaction (joining the caller's ``transaction.atomic()`` when there is
one) and maps database errors to the spec's kinds (``Unavailable``, ``Timeout``, ``Conflict``,
``Internal``). The statements are named in ``storage.sql.periodic``, and the scheduler
(``runscheduler``, ``runworker --scheduler``, the Celery beat scheduler, the status view, the
system checks) calls these functions instead of running SQL of its own.

Fencing: a lease owner passes its :class:`Fence` (namespace, node, token). The operations that
enqueue or guard take the lease row ``FOR SHARE`` where owner and token are the caller's, inside
their transaction, so a takeover (an ``UPDATE`` of that row) either happened before (the caller
gets :class:`LeaseLost`, nothing is written) or waits until the caller's transaction commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from runnerq_django.storage import db, errors
from runnerq_django.storage.sql import common as sql_common
from runnerq_django.storage.sql import periodic as q
from runnerq_django.storage.types import NewActivity

# --- types -----------------------------------------------------------------------------------


class LeaseLost(errors.ClaimLost):
    """The caller's fencing token is stale: another process owns the namespace. Nothing was written."""


@dataclass(frozen=True)
class Fence:
    """A lease owner's credentials, checked atomically with its writes."""

    namespace: str
    node: str
    token: int


@dataclass(frozen=True)
class LeaseState:
    """The lease row as read (status pages, non-owners)."""

    namespace: str
    owner: str | None
    release: int | None
    token: int | None
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None
    expired: bool

    @property
    def held(self) -> bool:
        return self.owner is not None and not self.expired


@dataclass(frozen=True)
class Occurrence:
    """One due occurrence to enqueue: its nominal instant, idempotency key, and the activity."""

    occurrence: datetime
    key: str
    queue: str
    activity: NewActivity


@dataclass(frozen=True)
class Enqueued:
    occurrence: datetime
    created: bool  # False: another scheduler (or an earlier tick) already enqueued it
    activity_id: uuid.UUID | None  # None when the guard row was already there


@dataclass(frozen=True)
class UnsentOccurrence:
    key: str
    job_id: str
    occurrence: datetime
    node: str
    token: int | None
    guarded_at: datetime


def _check_fence(alias: str, fence: Fence | None) -> None:
    if fence is None:
        return
    row = db.fetch_one(
        alias, q.CHECK_FENCE, {"namespace": fence.namespace, "node": fence.node, "token": fence.token}
    )
    if row is None:
        raise LeaseLost(
            f"{fence.node} lost namespace {fence.namespace!r} (fencing token {fence.token} is stale)"
        )


# --- the clock and the lease -----------------------------------------------------------------


@db.operation
def db_now(*, using: str | None = None) -> datetime:
    """Postgres ``now()``: the one clock of the whole fleet (due-ness and lease expiry)."""
    now: datetime = db.fetch_row(db.alias_for(using), sql_common.DB_NOW)[0]
    return now


@db.operation
def acquire_lease(
    namespace: str, node: str, release: int, seconds: float, *, using: str | None = None
) -> int | None:
    """Acquire or renew the namespace's lease; the fencing token, or None when another process of
    the same or a higher release holds an unexpired lease."""
    row = db.fetch_one(
        db.alias_for(using),
        q.ACQUIRE_LEASE,
        {"namespace": namespace, "node": node, "release": release, "seconds": float(seconds)},
    )
    return None if row is None else row[0]


@db.operation
def force_lease(namespace: str, node: str, release: int, seconds: float, *, using: str | None = None) -> int:
    """Take the lease whoever holds it (an operator's takeover); always a new token. Waits for
    any enqueue of the old owner that is in flight (its ``FOR SHARE`` on the row) to commit."""
    params = {"namespace": namespace, "node": node, "release": release, "seconds": float(seconds)}
    return int(db.fetch_row(db.alias_for(using), q.FORCE_LEASE, params)[0])


@db.operation
def release_lease(fence: Fence, *, using: str | None = None) -> bool:
    """Expire our lease at once (clean shutdown); False when it was no longer ours."""
    params = {"namespace": fence.namespace, "node": fence.node, "token": fence.token}
    return db.fetch_one(db.alias_for(using), q.RELEASE_LEASE, params) is not None


@db.operation
def read_lease(namespace: str, *, using: str | None = None) -> LeaseState:
    row = db.fetch_one(db.alias_for(using), q.READ_LEASE, {"namespace": namespace})
    if row is None:
        return LeaseState(namespace, None, None, None, None, None, None, True)
    return LeaseState(namespace, *row)


@db.operation
def holds_lease(fence: Fence, *, using: str | None = None) -> bool:
    """Whether ``fence`` is still the lease's owner and token (before a record write)."""
    alias = db.alias_for(using)
    with db.atomic(alias):
        try:
            _check_fence(alias, fence)
        except LeaseLost:
            return False
    return True


# --- enqueueing ------------------------------------------------------------------------------


@db.operation
def enqueue_occurrences(
    namespace: str,
    job_id: str,
    occurrences: Iterable[Occurrence],
    *,
    node: str,
    fence: Fence | None = None,
    fence_using: str | None = None,
    using: str | None = None,
) -> list[Enqueued]:
    """One job's due occurrences, in one transaction: the fencing check (``LeaseLost``, nothing
    written), then per occurrence the guard row (``INSERT ... ON CONFLICT DO NOTHING``) and, when
    the guard is new, the activity (``storage.submit`` with the occurrence's idempotency key and
    ``return_existing``, so even a pruned guard cannot make a second activity).

    ``fence_using``: the database of the lease row when it is not the occurrences' (a job whose
    queue lives on another database, ``RUNNERQ['QUEUE_DATABASES']``). The lease row is then held
    ``FOR SHARE`` in a transaction on its own database that ends after the occurrences' commits,
    so a takeover still either comes first (``LeaseLost``, nothing written) or waits for it."""
    alias = db.alias_for(using)
    lease_alias = fence_using or alias
    if fence is None or lease_alias == alias:
        with db.atomic(alias):
            _check_fence(alias, fence)
            return _enqueue_guarded(alias, namespace, job_id, occurrences, node, fence)
    with db.atomic(lease_alias):
        _check_fence(lease_alias, fence)
        with db.atomic(alias):
            return _enqueue_guarded(alias, namespace, job_id, occurrences, node, fence)


def _enqueue_guarded(
    alias: str,
    namespace: str,
    job_id: str,
    occurrences: Iterable[Occurrence],
    node: str,
    fence: Fence | None,
) -> list[Enqueued]:
    from runnerq_django.storage.submit import submit

    done: list[Enqueued] = []
    for item in occurrences:
        claimed = db.fetch_one(
            alias,
            q.CLAIM_OCCURRENCE,
            {
                "key": item.key,
                "namespace": namespace,
                "job_id": job_id,
                "occurrence": item.occurrence,
                "node": node,
                "token": None if fence is None else fence.token,
            },
        )
        if claimed is None:
            done.append(Enqueued(item.occurrence, False, None))
            continue
        result = submit(item.queue, item.activity, using=alias)
        db.fetch_one(alias, q.SET_OCCURRENCE_ACTIVITY, {"key": item.key, "activity_id": result.id})
        done.append(Enqueued(item.occurrence, result.created, result.id))
    return done


# --- the Celery beat guard -------------------------------------------------------------------


@db.operation
def guard_occurrence(
    namespace: str,
    job_id: str,
    key: str,
    occurrence: datetime,
    *,
    node: str,
    fence: Fence | None = None,
    using: str | None = None,
) -> bool:
    """Take an occurrence before sending it elsewhere (Celery): the fencing check and the guard
    row, committed. False when the guard was already taken (by anyone, sent or not)."""
    alias = db.alias_for(using)
    with db.atomic(alias):
        _check_fence(alias, fence)
        return (
            db.fetch_one(
                alias,
                q.CLAIM_OCCURRENCE,
                {
                    "key": key,
                    "namespace": namespace,
                    "job_id": job_id,
                    "occurrence": occurrence,
                    "node": node,
                    "token": None if fence is None else fence.token,
                },
            )
            is not None
        )


@db.operation
def send_guarded(key: str, task_id: str, send: Callable[[], object], *, using: str | None = None) -> bool:
    """Send a guarded occurrence and record it, in one transaction that holds the guard row's lock
    while ``send()`` talks to the broker (the unsent scan skips rows under a live send).

    Returns False without calling ``send`` when the guard row is gone or already sent. When
    ``send`` raises, nothing is recorded (the guard stays, unsent) and its error propagates as
    is. A database error after ``send`` returned leaves the occurrence sent but unconfirmed.
    """
    alias = db.alias_for(using)
    with db.atomic(alias):
        if db.fetch_one(alias, q.LOCK_UNSENT_GUARD, {"key": key}) is None:
            return False
        send()
        db.fetch_one(alias, q.MARK_SENT, {"key": key, "task_id": task_id})
    return True


@db.operation
def mark_sent(key: str, task_id: str, *, using: str | None = None) -> bool:
    """Confirm a send after the fact (its confirmation failed); False when already confirmed."""
    return db.fetch_one(db.alias_for(using), q.MARK_SENT, {"key": key, "task_id": task_id}) is not None


@db.operation
def release_guard(key: str, *, using: str | None = None) -> bool:
    """Give an unsent guard back (the broker certainly did not take the message), so that a
    later tick sends the occurrence. A sent guard is never released."""
    return db.fetch_one(db.alias_for(using), q.RELEASE_GUARD, {"key": key}) is not None


@db.operation
def unsent_occurrences(
    namespace: str,
    job_ids: list[str],
    *,
    since: datetime,
    older_than_seconds: float,
    using: str | None = None,
) -> list[UnsentOccurrence]:
    """Guarded occurrences of ``job_ids`` (at or after ``since``) guarded more than
    ``older_than_seconds`` ago whose send was never confirmed, skipping those a live process is
    sending right now (its row lock)."""
    alias = db.alias_for(using)
    with db.atomic(alias):
        rows = db.fetch_all(
            alias,
            q.UNSENT_OCCURRENCES,
            {
                "namespace": namespace,
                "job_ids": list(job_ids),
                "since": since,
                "older_than": float(older_than_seconds),
            },
        )
    return [UnsentOccurrence(*row) for row in rows]


# --- evidence, counts, retention -------------------------------------------------------------


@db.operation
def last_occurrences(namespace: str, job_ids: list[str], *, using: str | None = None) -> dict[str, datetime]:
    """The last enqueued (guarded) occurrence of each job that has one."""
    if not job_ids:
        return {}
    return dict(
        db.fetch_all(
            db.alias_for(using), q.LAST_OCCURRENCES, {"namespace": namespace, "job_ids": list(job_ids)}
        )
    )


@db.operation
def recent_job_ids(
    namespace: str, since: datetime, *, using: str | None = None
) -> list[tuple[str, datetime]]:
    """``(job_id, last occurrence)`` of every job with an occurrence after ``since``; empty when
    the scheduler's tables don't exist yet (before ``migrate``)."""
    alias = db.alias_for(using)
    if not db.fetch_row(alias, q.OCCURRENCES_TABLE_EXISTS)[0]:
        return []
    return [
        tuple(row) for row in db.fetch_all(alias, q.RECENT_JOB_IDS, {"namespace": namespace, "since": since})
    ]


@db.operation
def count_repair(namespace: str, job_id: str, reason: str, *, using: str | None = None) -> None:
    """Add one to the durable repair count of (namespace, job, reason, today UTC)."""
    db.fetch_one(
        db.alias_for(using), q.COUNT_REPAIR, {"namespace": namespace, "job_id": job_id, "reason": reason}
    )


@db.operation
def repair_counts(namespace: str, *, using: str | None = None) -> dict[str, dict[str, int]]:
    """``{job_id: {reason: count}}`` over every day kept."""
    counts: dict[str, dict[str, int]] = {}
    for job_id, reason, count in db.fetch_all(db.alias_for(using), q.REPAIR_COUNTS, {"namespace": namespace}):
        counts.setdefault(job_id, {})[reason] = int(count)
    return counts


@db.operation
def prune_occurrences(
    namespace: str, before: datetime, *, batch: int = 5000, max_batches: int = 20, using: str | None = None
) -> int:
    """Delete guard rows of occurrences before ``before``, always keeping each job's newest row
    (the evidence). Batches of ``batch`` rows, each its own transaction (a savepoint inside a
    caller's), so a large prune never holds many row locks for long. Returns the number of rows deleted."""
    alias = db.alias_for(using)
    deleted = 0
    for _ in range(max_batches):
        with db.atomic(alias):
            rows = len(
                db.fetch_all(
                    alias, q.PRUNE_OCCURRENCES, {"namespace": namespace, "before": before, "batch": batch}
                )
            )
        deleted += rows
        if rows < batch:
            break
    return deleted


__all__ = [
    "Enqueued",
    "Fence",
    "LeaseLost",
    "LeaseState",
    "Occurrence",
    "UnsentOccurrence",
    "acquire_lease",
    "count_repair",
    "db_now",
    "enqueue_occurrences",
    "force_lease",
    "guard_occurrence",
    "holds_lease",
    "last_occurrences",
    "mark_sent",
    "prune_occurrences",
    "read_lease",
    "recent_job_ids",
    "release_guard",
    "release_lease",
    "repair_counts",
    "send_guarded",
    "unsent_occurrences",
]
