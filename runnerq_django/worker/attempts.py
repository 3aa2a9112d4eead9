"""The attempts a worker process holds: claimed, running, or waiting for their completion to be
recorded. The lease keeper renews exactly these claims; the watchdog times them out; shutdown
releases the ones still held. Also where a running handler is interrupted.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runnerq_django.exceptions import AttemptLost, Interrupt

if TYPE_CHECKING:
    from runnerq_django.activities.nouns import HandlerContext
    from runnerq_django.storage.types import Claim, ClaimedActivity

CLAIMED = "claimed"  # waiting for an executor thread
RUNNING = "running"  # its handler runs
RECORDING = "recording"  # finished; the completion is being written (the ack buffer)

LEASE_RAN_OUT = "the lease ran out before the handler started"


@dataclass(eq=False, slots=True)
class Attempt:
    activity: ClaimedActivity
    claimed_at: float  # time.monotonic()
    deadline: float  # claimed_at + the activity's timeout
    # When the lease is over by this process's own clock: the claim's (then the last renewal's)
    # send time + the lease. Past it the database may have given the activity to someone else.
    lease_until: float = float("inf")
    state: str = CLAIMED
    context: HandlerContext | None = None
    thread_id: int | None = None
    # Stops the handler instead of an exception in its thread: cancels an async handler's task,
    # kills a process-mode handler's child (isolation.Stopper).
    cancel_async: Callable[[], None] | None = None
    lost: str | None = None  # why the claim is gone (set by whoever found out first)
    timed_out: bool = False
    # A sync handler in a thread with a soft_timeout: when the watchdog warns it (the runner
    # sets it; inf: no soft limit here). See Attempts.warn.
    soft_timeout: float | None = None  # the handler type's soft_timeout (seconds)
    soft_deadline: float = float("inf")
    soft_pending: bool = field(default=False, repr=False)  # the pending interrupt is the soft one
    warned: bool = False
    outcome_recorded: bool = False  # a fail/park/complete owns this attempt's outcome
    completion_queued: bool = False  # its result waits in the ack buffer, which removes it once written
    outcome: str | None = None  # how it was settled (completed, retrying, parked ...): metrics, tracing
    interrupt_pending: bool = field(default=False, repr=False)
    _claim: Claim | None = field(default=None, repr=False)

    @property
    def claim(self) -> Claim:
        """The activity's claim, made once (the ack buffer and each renewal round ask for it)."""
        claim = self._claim
        if claim is None:
            claim = self._claim = self.activity.claim
        return claim

    @property
    def queue(self) -> str:
        return self.activity.queue_name

    # How a log sentence names the attempt (a template over log_fields()).
    NAMED = "activity %(activity_id)s (%(activity_type)s, attempt %(attempt)s, queue %(queue)s)"

    def log_fields(self) -> dict[str, object]:
        activity = self.activity
        return {
            "activity_id": str(activity.id),
            "activity_type": activity.activity_type,
            "queue": activity.queue_name,
            "attempt": activity.attempt,
        }


def _set_async_exc(thread_id: int, exc_type: type[BaseException] | None) -> int:
    # ctypes.pythonapi functions return a C int (untyped: Any to mypy).
    changed: int = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type is not None else ctypes.py_object()
    )
    return changed


class Attempts:
    """Thread-safe registry of this process's attempts, by activity id."""

    def __init__(self) -> None:
        # By the activity id's integer (uuid.UUID hashes in Python code; its int in C).
        self._by_id: dict[int, Attempt] = {}
        self._lock = threading.Lock()
        # Called with the attempts that left, after their outcome was written (flow control
        # wakes the workers waiting for a concurrency slot); None: nothing to do.
        self.on_removed: Callable[[list[Attempt]], None] | None = None

    def add(self, activities: list[ClaimedActivity], lease_until: float = float("inf")) -> list[Attempt]:
        now = time.monotonic()
        attempts = [Attempt(a, now, now + a.timeout_seconds, lease_until=lease_until) for a in activities]
        with self._lock:
            for attempt in attempts:
                self._by_id[attempt.activity.id.int] = attempt
        return attempts

    def remove(self, attempts: list[Attempt]) -> None:
        with self._lock:
            for attempt in attempts:
                key = attempt.activity.id.int
                if self._by_id.get(key) is attempt:
                    del self._by_id[key]
        if self.on_removed is not None and attempts:
            self.on_removed(attempts)

    def snapshot(self) -> list[Attempt]:
        with self._lock:
            return list(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    # Who decides an attempt's outcome: exactly one of the handler's thread, the watchdog (timeout),
    # the lease keeper (lost claim) or shutdown (release).
    def take_outcome(self, attempt: Attempt) -> bool:
        with self._lock:
            if attempt.outcome_recorded:
                return False
            attempt.outcome_recorded = True
            return True

    # Handler threads -------------------------------------------------------------------------------

    def enter_handler(self, attempt: Attempt) -> bool:
        """Mark the attempt running on this thread; False if it was lost before it started,
        or if its lease is over by this process's clock (the process was frozen, or starved,
        between the claim and now): the reaper or another worker may have it, and starting the
        handler would run it twice."""
        with self._lock:
            if attempt.lost is None and time.monotonic() >= attempt.lease_until:
                attempt.lost = LEASE_RAN_OUT
            if attempt.lost is not None or attempt.outcome_recorded:
                return False
            attempt.state = RUNNING
            attempt.thread_id = threading.get_ident()
            return True

    def lease_ran_out(self, attempt: Attempt) -> AttemptLost:
        """The runner's last look at the lease, right before the handler's body, found it over
        by this process's clock: :meth:`enter_handler` passed, then the thread was held up
        before the body (the process frozen and resumed, or starved), and the reaper may have
        the claim now. Marks the attempt lost; the exception it is settled with."""
        with self._lock:
            if attempt.lost is None:
                attempt.lost = LEASE_RAN_OUT
            return AttemptLost(attempt.lost)

    def leave_handler(self, attempt: Attempt, *, take_outcome: bool = False) -> bool:
        """The handler returned: no interrupt may reach this thread for it any more. A pending
        one (requested but not yet raised) is withdrawn so it can't hit the next activity.

        With ``take_outcome`` (the handler returned a value), also :meth:`take_outcome` in the
        same critical section, unless the claim was lost meanwhile; whether it was taken."""
        with self._lock:
            if attempt.state == RUNNING:
                attempt.state = RECORDING
            if attempt.interrupt_pending and attempt.thread_id is not None:
                _set_async_exc(attempt.thread_id, None)
                attempt.interrupt_pending = False
                attempt.soft_pending = False
            attempt.thread_id = None
            attempt.cancel_async = None
            # Past the withdrawal above no interrupt can be raised here any more: an outcome
            # taken below is never followed by an Interrupt out of this call.
            if not take_outcome or attempt.lost is not None or attempt.outcome_recorded:
                return False
            attempt.outcome_recorded = True
            return True

    def interrupt(self, attempt: Attempt, reason: str, exc_type: type[Interrupt]) -> None:
        """Stop a running handler: its context refuses further writes at once, an async handler's
        task is cancelled, and a sync handler gets ``exc_type`` raised at its next Python
        bytecode (a handler blocked inside C code, e.g. ``time.sleep`` or a socket read,
        finishes that call first; its writes are fenced either way)."""
        with self._lock:
            if attempt.lost is None:
                attempt.lost = reason
            if attempt.context is not None and attempt.context.lost is None:
                attempt.context.lost = reason
            if attempt.state != RUNNING:
                return
            if attempt.cancel_async is not None:
                attempt.cancel_async()
            elif (
                attempt.thread_id is not None
                and (not attempt.interrupt_pending or attempt.soft_pending)  # replaces a soft one
                and _set_async_exc(attempt.thread_id, exc_type) == 1
            ):
                attempt.interrupt_pending = True
                attempt.soft_pending = False

    def warn(self, attempt: Attempt, exc_type: type[BaseException]) -> None:
        """The soft limit of a sync handler on a thread: ``exc_type`` (an ``Exception`` the
        handler may catch) raised once at its next Python bytecode, the claim kept. Like any
        interrupt it cannot cut a blocking C call short; the hard limit (``interrupt``) still
        applies, and replaces this one if it has not landed yet."""
        with self._lock:
            if attempt.warned or attempt.state != RUNNING or attempt.outcome_recorded:
                return
            attempt.warned = True
            if (
                attempt.thread_id is not None
                and not attempt.interrupt_pending
                and _set_async_exc(attempt.thread_id, exc_type) == 1
            ):
                attempt.interrupt_pending = True
                attempt.soft_pending = True
