"""The storage layer as an object: ``Storage(config)``, built once from its settings, and
``StorageOperations``, the one typed interface listing every operation with its signature.

``StorageOperations`` is the contract (like River's driver interface): the storage tests run
against it (``tests/storage/conftest.py``'s ``store`` fixture), and a second implementation, or
a storage on another database, is whatever satisfies it. ``Storage`` satisfies it with the
operations of the subject modules (``submit.py``, ``attempts.py`` ...), each run with the
storage's own config: two ``Storage`` objects with different aliases or limits work side by side
in one process. The module-level functions (``storage.submit(queue, ...)``) are the same
operations on the default storage (:func:`default`), whose config the layers above install
(``storage/config.py``).

The contract leaves out the module functions' ``using=`` (a storage's alias is its config's);
``Storage``'s methods still take it, so a caller moving from the functions needs no change.

Internal: not part of the public API.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, Unpack
from uuid import UUID

from runnerq_django.storage import (
    commands,
    config,
    deploy,
    fast_forward,
    operations,
    periodic,
    pools,
    progress,
)
from runnerq_django.storage import fork as forks
from runnerq_django.storage.commands import CommandOptions, CommandResult
from runnerq_django.storage.config import StorageConfig
from runnerq_django.storage.deploy import LiveTypes
from runnerq_django.storage.fast_forward import DueLater
from runnerq_django.storage.fork import Fork, ForkRecord, Step
from runnerq_django.storage.periodic import Enqueued, Fence, LeaseState, Occurrence, UnsentOccurrence
from runnerq_django.storage.pools import QueueCapacity
from runnerq_django.storage.progress import Progress, PublishedEvent
from runnerq_django.storage.types import (
    Claim,
    ClaimedActivity,
    ClaimFilters,
    NewActivity,
    StoredResult,
    SubmitResult,
)

__all__ = ["Storage", "StorageConfig", "StorageOperations", "default"]

P = ParamSpec("P")
R = TypeVar("R")
UUIDs = Iterable[uuid.UUID]
IDs = Iterable[uuid.UUID | str]  # activity ids, as UUIDs or their text


class StorageOperations(Protocol):
    """Every storage operation. Each runs one transaction on the storage's database (joining the
    caller's ``atomic()``), checks its arguments before any SQL (``InvalidArgument`` naming the
    field) and raises the spec's typed errors (``storage/errors.py``). The docstrings of the
    subject modules' functions say the rest. (Keyword-only parameters are listed here in
    alphabetical order; their order never matters to a caller.)"""

    # -- submit (submit.py) --
    def submit(self, queue: str, activity: NewActivity, *, fence: Claim | None = None) -> SubmitResult:
        """Insert one activity, keyed ones per their policy."""
        ...

    def submit_many(
        self, queue: str, activities: Iterable[NewActivity], *, fence: Claim | None = None
    ) -> list[SubmitResult]:
        """Insert activities, results in input order."""
        ...

    def lookup_key(self, queue: str, business_key: str) -> uuid.UUID:
        """The activity holding a business key (``NotFound`` when none)."""
        ...

    # -- attempts (attempts.py) --
    def claim_statement(self, queue: str, **filters: Unpack[ClaimFilters]) -> tuple[str, dict[str, Any]]:
        """The statement ``claim`` runs, for EXPLAIN; no I/O."""
        ...

    def claim(self, queue: str, **filters: Unpack[ClaimFilters]) -> list[ClaimedActivity]:
        """Claim due activities in claim order, each with a lease and a token."""
        ...

    def renew(self, queue: str, claim: Claim, lease_ms: int) -> bool:
        """Extend a live claim's lease; False when the claim is lost."""
        ...

    def renew_many(self, queue: str, claims: Iterable[Claim], lease_ms: int) -> set[uuid.UUID]:
        """Extend leases; the ids still owned."""
        ...

    def release(self, queue: str, claims: Iterable[Claim]) -> int:
        """Give claims back (graceful shutdown), no attempt counted."""
        ...

    def complete(self, queue: str, claim: Claim, value: Any) -> None:
        """Store the Ok result of a claimed attempt."""
        ...

    def complete_many(self, queue: str, items: Iterable[tuple[Claim, Any]]) -> list[uuid.UUID]:
        """Store Ok results; the ids *not* completed."""
        ...

    def fail(
        self, queue: str, claim: Claim, reason: str, *, failure: Any = None, retryable: bool = True
    ) -> str:
        """End an attempt in failure: ``retrying``, ``failed`` or ``dead_letter``."""
        ...

    def reap(self, queue: str, limit: int) -> int:
        """Fail or retry attempts whose lease expired; how many."""
        ...

    def reap_ids(self, queue: str, limit: int) -> list[uuid.UUID]:
        """As ``reap``, the ids reaped."""
        ...

    # -- durable execution (durable.py) --
    def checkpoint(
        self, queue: str, claim: Claim, result_id: uuid.UUID, *, data: Any, state: str, step: str
    ) -> None:
        """Store a step's result under ``result_id``."""
        ...

    def register_dependency(self, queue: str, claim: Claim, producer_id: uuid.UUID) -> None:
        """Make the claimed activity a waiter on ``producer_id``'s result."""
        ...

    def register_dependencies(self, queue: str, claim: Claim, producer_ids: Iterable[uuid.UUID]) -> None:
        """Make the claimed activity a waiter on each producer's result, in one statement."""
        ...

    def park(
        self,
        queue: str,
        claim: Claim,
        *,
        kind: str,
        producer_id: uuid.UUID | None = None,
        result_id: uuid.UUID | None = None,
        step: str,
        wake_at: datetime | str | None = None,
    ) -> bool:
        """End the attempt by waiting (sleep, signal, await); whether it now waits."""
        ...

    def signal(
        self,
        queue: str,
        target_id: UUID,
        name: str,
        payload: Any,
        *,
        command_id: str = "",
        reason: str | None = None,
    ) -> bool:
        """Deliver a signal; whether it woke the target."""
        ...

    def get_result(self, queue: str, result_id: uuid.UUID) -> StoredResult | None:
        """One stored result."""
        ...

    def get_results(self, queue: str, ids: UUIDs) -> dict[uuid.UUID, StoredResult]:
        """Stored results by id."""
        ...

    def list_checkpoints(self, queue: str, owner_id: uuid.UUID) -> dict[uuid.UUID, StoredResult]:
        """The checkpoints and signals an activity owns, oldest first."""
        ...

    # -- retention (retention.py) --
    def cleanup(
        self, queue: str, *, batch: int = 500, completed_s: int = 0, events_s: int = 0, failed_s: int = 0
    ) -> int:
        """Delete finished roots past their window; how many."""
        ...

    # progress and published events (the app's own tables) -----------------------------------------

    def write_progress(
        self,
        queue: str,
        claim: Claim,
        *,
        attempt: int,
        events: Sequence[tuple[str, Any]] = (),
        progress: tuple[Any, Any, Any] | None = None,
    ) -> int | None:
        """An attempt's latest progress and its events, fenced; the last event number, or None."""
        ...

    def get_progress(self, queue: str, activity_id: uuid.UUID) -> Progress | None:
        """The latest progress an activity reported."""
        ...

    def read_events(
        self, queue: str, activity_id: uuid.UUID, *, after: int = 0, limit: int = 1000
    ) -> tuple[list[PublishedEvent], bool]:
        """Events after a sequence number, and whether the activity had ended."""
        ...

    def latest_event(self, queue: str, activity_id: uuid.UUID, name: str) -> Any:
        """The data of the newest event of a name."""
        ...

    # forks (re-running a root from a step) and the deploy check's reads ----------------------------

    def fork(
        self,
        queue: str,
        origin_id: uuid.UUID,
        *,
        actor: str = "",
        from_step: str,
        payload: Any = ...,
        reason: str | None = None,
    ) -> Fork:
        """A new run of an ended root, keeping what it recorded before a step."""
        ...

    def steps_of(self, queue: str, activity_id: uuid.UUID) -> list[Step]:
        """A root's recorded steps, in order."""
        ...

    def forks_of(self, queue: str, activity_id: uuid.UUID) -> list[ForkRecord]:
        """A run's forks and the one it is."""
        ...

    def live_types(self, *, examples: int = 3) -> list[LiveTypes]:
        """Unfinished activities per queue, type and status."""
        ...

    def parents_waiting_on(
        self, types: Sequence[str], *, examples: int = 3
    ) -> list[tuple[str, str, int, tuple[uuid.UUID, ...]]]:
        """Waiting parents of unfinished children of the types."""
        ...

    def live_canvases(self, canvas_type: str, *, limit: int = 10_000) -> list[tuple[uuid.UUID, str, Any]]:
        """Unfinished canvas orchestrators and their input."""
        ...

    def live_versions(self, *, examples: int = 3) -> list[tuple[str, str, int, int, tuple[uuid.UUID, ...]]]:
        """The oldest version live runs recorded per type and gate."""
        ...

    # -- operator commands (commands.py) --
    def cancel(
        self, queue: str, ids: IDs, *, cascade: bool = True, **common: Unpack[CommandOptions]
    ) -> CommandResult:
        """Cancel non-terminal activities."""
        ...

    def retry(
        self,
        queue: str,
        ids: IDs,
        *,
        only: Collection[str] | None = None,
        reset_attempts: bool = False,
        **common: Unpack[CommandOptions],
    ) -> CommandResult:
        """Run failed, cancelled and dead-lettered activities again."""
        ...

    def redrive(
        self, queue: str, ids: IDs, *, reset_attempts: bool = False, **common: Unpack[CommandOptions]
    ) -> CommandResult:
        """Retry dead letters only."""
        ...

    def run_now(self, queue: str, ids: IDs, **common: Unpack[CommandOptions]) -> CommandResult:
        """Make waiting and scheduled activities runnable now."""
        ...

    def reschedule(
        self, queue: str, ids: IDs, at: datetime | str, **common: Unpack[CommandOptions]
    ) -> CommandResult:
        """Move scheduled activities to ``at``."""
        ...

    def set_priority(
        self, queue: str, ids: IDs, priority: int, **common: Unpack[CommandOptions]
    ) -> CommandResult:
        """Change the priority of non-terminal activities."""
        ...

    def delete_tree(self, queue: str, ids: IDs, **common: Unpack[CommandOptions]) -> CommandResult:
        """Delete finished trees with their history."""
        ...

    def prune_ledger(self, *, batch: int = 1000, older_than_seconds: int = 7 * 86400) -> int:
        """Delete command-ledger rows past the replay window."""
        ...

    # -- worker pools (pools.py) --
    def register_pool(
        self, pool_id: uuid.UUID, queue: str, max_workers: int, activity_types: list[str] | None
    ) -> None:
        """Record a worker pool."""
        ...

    def heartbeat_pools(self, pool_ids: UUIDs) -> set[uuid.UUID]:
        """Touch pools; the ids still registered."""
        ...

    def deregister_pools(self, pool_ids: UUIDs) -> int:
        """Remove pools."""
        ...

    def prune_pools(self, stale_seconds: float) -> int:
        """Remove pools not seen for ``stale_seconds``."""
        ...

    def live_capacity(self, alive_seconds: float) -> dict[str, QueueCapacity]:
        """Workers per queue, from live pools."""
        ...

    # -- the test toolkit's fast-forward (fast_forward.py) --
    def due_later(
        self, queue: str, *, root_id: uuid.UUID | None = None, types: Iterable[str] | None = None
    ) -> list[DueLater]:
        """Runnable activities due after now, soonest first."""
        ...

    def make_due(self, queue: str, ids: UUIDs) -> list[uuid.UUID]:
        """Schedule runnable activities for now; the ids changed."""
        ...

    # -- periodic jobs (periodic.py) --
    def db_now(self) -> datetime:
        """The database clock."""
        ...

    def acquire_lease(self, namespace: str, node: str, release: int, seconds: float) -> int | None:
        """Take or extend the scheduler lease; its fence token, or None."""
        ...

    def force_lease(self, namespace: str, node: str, release: int, seconds: float) -> int:
        """Take the scheduler lease whoever holds it."""
        ...

    def release_lease(self, fence: Fence) -> bool:
        """Give the lease up."""
        ...

    def read_lease(self, namespace: str) -> LeaseState:
        """The lease as stored."""
        ...

    def holds_lease(self, fence: Fence) -> bool:
        """Whether ``fence`` still holds the lease."""
        ...

    def enqueue_occurrences(
        self,
        namespace: str,
        job_id: str,
        occurrences: Iterable[Occurrence],
        *,
        fence: Fence | None = None,
        fence_using: str | None = None,
        node: str,
    ) -> list[Enqueued]:
        """Enqueue a job's occurrences, each once (the lease on ``fence_using``'s database, when not theirs)."""
        ...

    def guard_occurrence(
        self,
        namespace: str,
        job_id: str,
        key: str,
        occurrence: datetime,
        *,
        fence: Fence | None = None,
        node: str,
    ) -> bool:
        """Claim an occurrence's send (Celery beat); whether this call got it."""
        ...

    def send_guarded(self, key: str, task_id: str, send: Callable[[], object]) -> bool:
        """Send a guarded occurrence and mark it sent."""
        ...

    def mark_sent(self, key: str, task_id: str) -> bool:
        """Mark a guarded occurrence sent."""
        ...

    def release_guard(self, key: str) -> bool:
        """Give a guarded occurrence back."""
        ...

    def unsent_occurrences(
        self, namespace: str, job_ids: list[str], *, older_than_seconds: float, since: datetime
    ) -> list[UnsentOccurrence]:
        """Guarded occurrences never marked sent."""
        ...

    def last_occurrences(self, namespace: str, job_ids: list[str]) -> dict[str, datetime]:
        """Each job's last occurrence."""
        ...

    def recent_job_ids(self, namespace: str, since: datetime) -> list[tuple[str, datetime]]:
        """Job ids with occurrences since ``since``."""
        ...

    def count_repair(self, namespace: str, job_id: str, reason: str) -> None:
        """Count one repair of a job's record."""
        ...

    def repair_counts(self, namespace: str) -> dict[str, dict[str, int]]:
        """Repairs by job and reason."""
        ...

    def prune_occurrences(
        self, namespace: str, before: datetime, *, batch: int = 5000, max_batches: int = 20
    ) -> int:
        """Delete occurrences older than ``before``."""
        ...


class _Operation(Generic[P, R]):
    """A storage operation as a method: the subject module's function, run with the storage's
    config active (``config.bind``), its signature kept for type checkers."""

    def __init__(self, func: Callable[P, R]) -> None:
        self.func = func
        self.name = func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, storage: Storage | None, owner: type | None = None) -> Callable[P, R]:
        if storage is None:
            return self.func
        func, storage_config = self.func, storage.config

        @functools.wraps(func)
        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            token = config.bind(storage_config)
            try:
                return func(*args, **kwargs)
            finally:
                config.unbind(token)

        storage.__dict__[self.name] = bound  # the next lookup finds it without __get__
        return bound


class Storage:
    """The storage layer built from one config (see the module). Cheap to build, but build it
    once: it holds nothing but its config, and its methods are bound on first use."""

    def __init__(self, storage_config: StorageConfig | None = None) -> None:
        self.config = storage_config or StorageConfig()

    def __repr__(self) -> str:
        return f"Storage({self.config!r})"

    submit = _Operation(operations.submit)
    submit_many = _Operation(operations.submit_many)
    lookup_key = _Operation(operations.lookup_key)

    claim_statement = _Operation(operations.claim_statement)
    claim = _Operation(operations.claim)
    renew = _Operation(operations.renew)
    renew_many = _Operation(operations.renew_many)
    release = _Operation(operations.release)
    complete = _Operation(operations.complete)
    complete_many = _Operation(operations.complete_many)
    fail = _Operation(operations.fail)
    reap = _Operation(operations.reap)
    reap_ids = _Operation(operations.reap_ids)

    checkpoint = _Operation(operations.checkpoint)
    register_dependency = _Operation(operations.register_dependency)
    register_dependencies = _Operation(operations.register_dependencies)
    park = _Operation(operations.park)
    signal = _Operation(operations.signal)
    get_result = _Operation(operations.get_result)
    get_results = _Operation(operations.get_results)
    list_checkpoints = _Operation(operations.list_checkpoints)

    cleanup = _Operation(operations.cleanup)

    write_progress = _Operation(progress.write)
    get_progress = _Operation(progress.get_progress)
    read_events = _Operation(progress.read_events)
    latest_event = _Operation(progress.latest_event)

    fork = _Operation(forks.fork)
    steps_of = _Operation(forks.steps_of)
    forks_of = _Operation(forks.forks_of)
    live_types = _Operation(deploy.live_types)
    parents_waiting_on = _Operation(deploy.parents_waiting_on)
    live_canvases = _Operation(deploy.live_canvases)
    live_versions = _Operation(deploy.live_versions)

    cancel = _Operation(commands.cancel)
    retry = _Operation(commands.retry)
    redrive = _Operation(commands.redrive)
    run_now = _Operation(commands.run_now)
    reschedule = _Operation(commands.reschedule)
    set_priority = _Operation(commands.set_priority)
    delete_tree = _Operation(commands.delete_tree)
    prune_ledger = _Operation(commands.prune_ledger)

    register_pool = _Operation(pools.register)
    heartbeat_pools = _Operation(pools.heartbeat)
    deregister_pools = _Operation(pools.deregister)
    prune_pools = _Operation(pools.prune)
    live_capacity = _Operation(pools.live_capacity)

    due_later = _Operation(fast_forward.due_later)
    make_due = _Operation(fast_forward.make_due)

    db_now = _Operation(periodic.db_now)
    acquire_lease = _Operation(periodic.acquire_lease)
    force_lease = _Operation(periodic.force_lease)
    release_lease = _Operation(periodic.release_lease)
    read_lease = _Operation(periodic.read_lease)
    holds_lease = _Operation(periodic.holds_lease)
    enqueue_occurrences = _Operation(periodic.enqueue_occurrences)
    guard_occurrence = _Operation(periodic.guard_occurrence)
    send_guarded = _Operation(periodic.send_guarded)
    mark_sent = _Operation(periodic.mark_sent)
    release_guard = _Operation(periodic.release_guard)
    unsent_occurrences = _Operation(periodic.unsent_occurrences)
    last_occurrences = _Operation(periodic.last_occurrences)
    recent_job_ids = _Operation(periodic.recent_job_ids)
    count_repair = _Operation(periodic.count_repair)
    repair_counts = _Operation(periodic.repair_counts)
    prune_occurrences = _Operation(periodic.prune_occurrences)


_default: tuple[StorageConfig, Storage] | None = None


def default() -> StorageOperations:
    """The storage of the module-level operations: the installed settings' (rebuilt when they
    change)."""
    global _default
    current = config.default()
    if _default is None or _default[0] is not current:
        _default = (current, Storage(current))
    return _default[1]
