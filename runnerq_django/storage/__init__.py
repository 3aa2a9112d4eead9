"""The storage layer: every state transition of the RunnerQ spec, as named SQL.

Each operation runs one transaction on the Django connection of its storage's alias (the
``using`` alias when given), joining the caller's ``transaction.atomic()`` when there is one, and
raises the spec's typed errors (``runnerq_django.storage.errors``). The functions here run on the
default storage, built from ``settings.RUNNERQ`` (``DATABASE`` ...); ``Storage(StorageConfig(...))``
is a storage of its own with the same operations as methods, and ``StorageOperations`` the typed
protocol listing them all (``store.py``; the settings it reads: ``config.py``). The worker, the
scheduler, the admin actions and the conformance driver all call these functions; none of them
writes its own SQL for a state change.

The operations (``operations.py``; every one takes ``queue`` first and ``using=None`` last,
keyword-only):

- ``submit(queue, activity: NewActivity, *, fence: Claim | None = None) -> SubmitResult``
- ``submit_many(queue, activities, *, fence=None) -> list[SubmitResult]`` (one round trip per
  1,000 activities without keys, or roots whose keys all follow ``return_existing``; results in
  input order; other keyed ones go through their policy key by key)
- ``claim(queue, *, types=None, limit=1, lease_ms=30000, worker_id="", root_id=None) -> list[ClaimedActivity]``
  (claim order; ``types=None`` any type, ``[]`` refused; ``root_id``: that tree only; token
  ``"<worker_id>:<32 hex>"`` or a UUID; ``claim_statement(...) -> (sql, params)`` is the exact
  statement, for EXPLAIN)
- ``renew(queue, claim, lease_ms) -> bool`` and ``renew_many(queue, claims, lease_ms) -> set[UUID]``
  (the ids still owned)
- ``complete(queue, claim, value)`` and ``complete_many(queue, [(claim, value)]) -> list[UUID]``
  (the ids *not* completed: claim lost, or a repeat with a different value)
- ``fail(queue, claim, reason, *, retryable=True, failure=None, delay_seconds=None) -> "retrying"|"failed"|"dead_letter"``
- ``release(queue, claims) -> int`` (graceful shutdown: back to runnable, no attempt counted)
- ``checkpoint(queue, claim, result_id, *, state: "Ok"|"Err", data, step)``
- ``register_dependency(queue, claim, producer_id)``; ``register_dependencies(queue, claim, producer_ids)``
  (up to 1,000 producers in one statement)
- ``park(queue, claim, *, kind, step, wake_at=None, result_id=None, producer_id=None) -> bool waiting``
  (``wake_at`` an aware datetime or RFC 3339 string: required for a sleep, an optional timeout for
  signal and await -- without it the activity waits, never due, until its result is stored)
- ``signal(queue, target_id, name, payload, *, command_id="", reason=None) -> bool woke``
- ``lookup_key(queue, business_key) -> UUID`` (``NotFound`` when no activity holds it)
- ``reap(queue, limit) -> int`` (``reap_ids``: the ids reaped) and
  ``cleanup(queue, *, completed_s=0, failed_s=0, events_s=0, batch=500) -> int`` (roots deleted)
- ``get_result(queue, result_id) -> StoredResult | None``,
  ``get_results(queue, ids) -> dict[UUID, StoredResult]``,
  ``list_checkpoints(queue, owner_id) -> dict[UUID, StoredResult]`` (checkpoints and signals
  owned by the activity, by result id, oldest first)

Progress and published events (``storage.progress``, the app's own tables, on ``Storage`` as
``write_progress``, ``get_progress``, ``read_events`` and ``latest_event``):

- ``progress.write(queue, claim, *, attempt, progress=None, events=()) -> int | None`` (fenced
  by the claim; the last event number, ``None`` when the claim no longer owns the activity)
- ``progress.get_progress(queue, activity_id) -> Progress | None``
- ``progress.read_events(queue, activity_id, *, after=0, limit=1000) -> (list[PublishedEvent], ended)``
- ``progress.latest_event(queue, activity_id, name) -> data | None``

Bad arguments raise ``InvalidArgument`` (``.field`` names the argument) before any SQL runs;
database failures map to ``Unavailable`` (connection, or a session left in a failed transaction:
25P02), ``Timeout`` (statement/lock timeout),
``Conflict`` (an id already taken, deadlock, serialization failure) or ``Internal``, the
driver's error kept as ``__cause__``. ``storage.validation`` holds the bounds, for layers
that check arguments early.

Operator commands (cancel, retry, redrive, run now, reschedule, set priority, delete a tree)
live in ``commands.py``; worker pool rows in ``pools.py``; the test toolkit's fast-forward
(``due_later``, ``make_due``) in ``fast_forward.py``.

Public: this package, ``operations``, ``errors``, ``types`` and ``commands``.
Internal: the other modules, not part of the public API.
"""

from runnerq_django.storage import operations
from runnerq_django.storage.config import StorageConfig
from runnerq_django.storage.errors import ErrorKind, StorageError
from runnerq_django.storage.operations import *  # noqa: F403  (every operation; its __all__ lists them)
from runnerq_django.storage.store import Storage, StorageOperations
from runnerq_django.storage.types import (
    Claim,
    ClaimedActivity,
    ClaimFilters,
    NewActivity,
    OnDuplicate,
    Priority,
    StoredResult,
    SubmitResult,
)

__all__ = [
    "Claim",
    "ClaimFilters",
    "ClaimedActivity",
    "ErrorKind",
    "NewActivity",
    "OnDuplicate",
    "Priority",
    "Storage",
    "StorageConfig",
    "StorageError",
    "StorageOperations",
    "StoredResult",
    "SubmitResult",
    *operations.__all__,
]
