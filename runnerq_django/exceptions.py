"""The exceptions of the public API, and the root of every error the package raises.

One hierarchy: every error derives from :class:`RunnerQError`, so ``except RunnerQError`` catches
anything runnerq-django raises on purpose::

    RunnerQError
    ├── NonRetryableError            raise from a handler: fail at once, no retry
    │   ├── StepFailed, SignalTimeout
    │   ├── CrossDatabaseError       a write that would cross databases (runnerq_django.routing)
    │   └── ChildFailed              (also an ActivityFailed)
    ├── ActivityFailed               a result you waited for is a failure
    ├── ResultTimeout                (also a TimeoutError) waiting for a result gave up
    ├── SoftTimeLimitExceeded        raised in a handler at its ``soft_timeout``: clean up
    ├── StorageError                 runnerq_django.storage.errors: one class per spec error kind
    │   ├── Unavailable, Conflict, NotFound, Internal, SerializationError, Timeout,
    │   │   DuplicateActivity, IdempotencyConflict, ClaimLost, CheckpointConflict,
    │   │   InvalidArgument, Unsupported
    │   └── ConfigurationError
    │       └── SchemaMissing
    ├── SchemaMismatch               runnerq_django.schema.compare: the live schema differs from the catalog
    ├── DatabaseUnreachable          runnerq_django.management.preflight: no database at start-up
    │   └── DatabaseNotAnswering     a server that does not answer (an outage: waited for)
    ├── WorkerConfigurationError     runnerq_django.worker.runtime: a worker that cannot start
    └── DeclarationError, ScheduleError   runnerq_django.scheduler: a bad ``@periodic`` job

The :class:`Interrupt` family is control flow of the worker, not errors: it derives from
``BaseException`` so that a handler's ``except Exception`` (or ``except RunnerQError``) cannot
swallow it. Handlers never raise or catch these.

This module imports nothing from the package but ``failures`` (which imports nothing of it), so
every layer, ``storage/`` included, may import it.
"""

from __future__ import annotations

import uuid
from typing import Any

from runnerq_django.spec import failures

__all__ = [
    "ActivityFailed",
    "ActivityTimedOut",
    "AttemptLost",
    "ChildFailed",
    "CrossDatabaseError",
    "Interrupt",
    "NonRetryableError",
    "Park",
    "ResultTimeout",
    "RunnerQError",
    "SignalTimeout",
    "SoftTimeLimitExceeded",
    "StepFailed",
    "UnsupportedValue",
]


class RunnerQError(Exception):
    """The base of every error runnerq-django raises."""


class NonRetryableError(RunnerQError):
    """Raise from a handler (or a step) to fail the activity at once: status ``failed``, no retry."""


class UnsupportedValue(NonRetryableError, ValueError):
    """A stored value (another SDK's) with no Python counterpart, such as a SuperJSON ``regexp``
    read with ``RUNNERQ['SUPERJSON'] = 'typed'``; the message names its type and JSON path.
    Non-retryable: the stored value reads the same on every attempt."""


class CrossDatabaseError(NonRetryableError):
    """A write that would cross databases (``RUNNERQ['QUEUE_DATABASES']``): a spawn into a queue of
    another database than its parent's (the spec's tree is one database), or an enqueue inside
    ``transaction.atomic()`` of another database than the queue's (it would not roll back with
    it). Raised before anything is written; from a handler, it fails the attempt without a retry."""


class ActivityFailed(RunnerQError):
    """The activity ended without success; ``error`` is the stored reason, ``kind`` the spec's
    failure type (``non_retryable``, ``dead_letter``, ``cancelled`` ...), ``data`` the stored
    result, ``failure`` its recorded exception (name, message, stack), read from the Python or
    the TypeScript SDK's fields."""

    def __init__(self, activity_id: uuid.UUID, data: Any):
        self.activity_id = activity_id
        self.data = data
        self.failure = failures.read(data)
        if isinstance(data, dict):
            self.error = str(data.get("error", data))
            self.kind = str(data.get("type", "error"))
        else:
            self.error = str(data)
            self.kind = "error"
        super().__init__(f"activity {activity_id} failed ({self.kind}): {self.error}")


class ChildFailed(ActivityFailed, NonRetryableError):
    """A child awaited by ``ctx.wait`` failed. Non-retryable: a retry would await the same
    stored failure again."""


class StepFailed(NonRetryableError):
    """A ``ctx.step`` failed with a non-retryable error; the failure is memoized, so replays
    raise it again without re-running the step."""

    def __init__(self, step: str, error: str):
        self.step = step
        self.error = error
        super().__init__(f"step {step!r} failed: {error}")


class SignalTimeout(NonRetryableError):
    """``ctx.wait_for_signal`` reached its timeout without the signal."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"signal {name!r} did not arrive before its timeout")


class ResultTimeout(RunnerQError, TimeoutError):
    """``handle.result(timeout=...)`` gave up waiting; the activity may still finish later."""


class SoftTimeLimitExceeded(RunnerQError):
    """Raised inside a sync handler when it reaches its type's ``soft_timeout`` (an async handler
    is cancelled instead). An ``Exception``, so the handler may catch it, clean up, and either
    return (the attempt succeeds) or re-raise (the attempt fails as a retryable timeout). Raised
    at the handler's next Python bytecode in a thread, so a blocking C call finishes first; in a
    child process (``isolation="process"``) a signal delivers it, which also ends ``time.sleep``
    and waits on sockets. The hard limit (the activity's ``timeout``) applies either way."""

    def __init__(self, *args: object) -> None:
        # Raised by type from another thread (PyThreadState_SetAsyncExc): no arguments then.
        super().__init__(*(args or ("the handler ran past its soft timeout",)))


class Interrupt(BaseException):
    """Stops a handler; the worker, not the handler, decides what happens next."""


class Park(Interrupt):
    """The handler waits durably (sleep, signal, child): the worker parks the activity."""


class AttemptLost(Interrupt):
    """This attempt no longer owns the activity (lease expired and reclaimed, cancelled, or
    released at shutdown): its writes are refused and the handler is stopped. Not the storage error
    :class:`~runnerq_django.storage.errors.ClaimLost`, which a storage call raises for a stale claim."""


class ActivityTimedOut(Interrupt):
    """The attempt ran past the activity's ``timeout``; it was failed as a retryable attempt."""
