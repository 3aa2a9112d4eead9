"""The exceptions of the public API, in one module.

Handlers raise :class:`NonRetryableError` to fail without a retry (any other exception retries).
Callers waiting for a result get :class:`ActivityFailed` or :class:`ResultTimeout`. The
:class:`Interrupt` family is control flow of the worker, not errors: they derive from
``BaseException`` so that a handler's ``except Exception`` cannot swallow them.
"""

from __future__ import annotations

import uuid
from typing import Any

from runnerq_django import failures


class NonRetryableError(Exception):
    """Raise from a handler (or a step) to fail the activity at once: status ``failed``, no retry."""


class UnsupportedValue(NonRetryableError, ValueError):
    """A stored value (another SDK's) with no Python counterpart, such as a SuperJSON ``regexp``
    read with ``RUNNERQ['SUPERJSON'] = 'typed'``; the message names its type and JSON path.
    Non-retryable: the stored value reads the same on every attempt."""


class ActivityFailed(Exception):
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


class ResultTimeout(TimeoutError):
    """``handle.result(timeout=...)`` gave up waiting; the activity may still finish later."""


class Interrupt(BaseException):
    """Stops a handler; the worker, not the handler, decides what happens next."""


class Park(Interrupt):
    """The handler waits durably (sleep, signal, child): the worker parks the activity."""


class ClaimLost(Interrupt):
    """This attempt no longer owns the activity (lease expired and reclaimed, cancelled, or
    released at shutdown): its writes are refused and the handler is stopped."""


class ActivityTimedOut(Interrupt):
    """The attempt ran past the activity's ``timeout``; it was failed as a retryable attempt."""
