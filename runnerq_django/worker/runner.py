"""Runs one claimed attempt on an executor thread and records its outcome.

The outcome, in order of precedence:

1. the claim was lost (lease reclaimed, cancelled, released, timed out): write nothing, the
   fence would refuse it anyway;
2. the context asked to park (even if the handler swallowed the ``Park``): park it;
3. the handler returned: queue the completion in the ack buffer;
4. it raised ``NonRetryableError``: fail it for good; any other exception: a retryable failure
   (retry with backoff, or dead letter once the attempts are spent).

Whatever happens, the attempt is settled: an error in the worker's own code around the handler
(a bug, or a value that breaks a check in an unforeseen way) fails it for good with an
``internal error: ...`` reason (:meth:`Runner.crashed`) instead of leaving it claimed, its lease
renewed for as long as the process lives.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from asgiref.sync import async_to_sync

from runnerq_django import metrics
from runnerq_django.activities.registry import ActivityRegistry, AnyActivity
from runnerq_django.exceptions import (
    ActivityTimedOut,
    AttemptLost,
    Interrupt,
    NonRetryableError,
    SoftTimeLimitExceeded,
)
from runnerq_django.logs import log_event
from runnerq_django.observability import tracing
from runnerq_django.retries import DEFAULT_POLICY, RetryPolicy
from runnerq_django.spec import failures
from runnerq_django.storage import config as storage_config
from runnerq_django.storage import errors
from runnerq_django.worker import isolation
from runnerq_django.worker.acks import AckBuffer
from runnerq_django.worker.attempts import Attempt, Attempts
from runnerq_django.worker.batches import BatchCollector
from runnerq_django.worker.context import Context, _current
from runnerq_django.worker.db import heal, retrying

logger = logging.getLogger("runnerq_django.worker")
T = TypeVar("T")

MAX_ERROR_CHARS = 4000
# How a failure's log sentence says what happens next.
_OUTCOME_WORDS = {
    "retrying": "it will be retried",
    "failed": "not retried",
    "dead_letter": "out of attempts: dead-lettered",
}
_OUTCOME_METRICS = {
    "retrying": "activity_retry",
    "failed": "activity_failed_non_retry",
    "dead_letter": "activity_dead_lettered",
}


class _QueueMetrics(NamedTuple):
    """A queue's per-attempt metrics, bound once (metrics.counter / metrics.histogram). Its
    enqueue-to-start is observed with the claim (dispatcher.observe_claimed)."""

    started: metrics.BoundCounter
    execution: metrics.BoundHistogram


RESULT_LIMIT = "RUNNERQ['MAX_RESULT_BYTES']"


def _json_value(value: Any, field: str, *, max_bytes: int, limit_name: str) -> Any:
    from runnerq_django.activities import arguments

    global _json_value
    _json_value = arguments.json_value  # imported on first use, then called directly
    return _json_value(value, field, max_bytes=max_bytes, limit_name=limit_name)


class Runner:
    def __init__(
        self,
        *,
        registry: ActivityRegistry,
        attempts: Attempts,
        acks: AckBuffer,
        alias: str,
        inline_wait: float,
    ):
        self.registry = registry
        self.attempts = attempts
        self.acks = acks
        self.alias = alias
        self.inline_wait = inline_wait
        self._local = threading.local()  # each executor thread's connection (_heal)
        self._queue_metrics: dict[str, _QueueMetrics] = {}
        self.batches = BatchCollector(alias=alias)  # the batch handlers' gathering (its capacity: runtime)

    # the executor calls this -------------------------------------------------------------------------

    def __call__(self, attempt: Attempt) -> None:
        activity = attempt.activity
        self._heal()
        handler = self.registry.resolve(activity.activity_type)
        if handler is None:
            metrics.inc("activity_handler_not_found", queue=activity.queue_name)
            self.fail(
                attempt,
                f"no handler for activity type {activity.activity_type!r} in this worker",
                retryable=False,
            )
            return
        options = handler.options  # the type's settings, read once per attempt
        ctx = self.context_for(attempt)
        attempt.context = ctx
        soft = attempt.soft_timeout = options.soft_timeout_seconds
        isolated = options.isolation == "process"
        if soft is not None and not handler.is_async and not isolated:
            attempt.soft_deadline = attempt.claimed_at + soft  # the watchdog warns it (Attempts.warn)
        if isolated:
            attempt.cancel_async = isolation.Stopper()  # an interrupt kills its child process
        # The worker's own set-up comes before enter_handler: from there on an interrupt (a lost
        # lease, a hard time limit) may be raised into this thread at any bytecode, and one raised
        # while it holds a lock every thread shares (a logging handler's, a metric's) would leave
        # that lock taken for good, and every thread of the process stuck on it.
        queue_metrics = self._queue_metrics.get(activity.queue_name) or self._metrics_of(activity.queue_name)
        queue_metrics.started.inc()
        if logger.isEnabledFor(logging.DEBUG):
            log_event(
                logger,
                logging.DEBUG,
                "activity.started",
                f"Starting {Attempt.NAMED}.",
                **attempt.log_fields(),
            )
        token = _current.set(ctx)
        traced = tracing.attempt_started(activity)  # None when tracing is off
        began = time.perf_counter()
        value: Any = None
        error: BaseException | None = None
        settled = False  # the completion's outcome taken on leaving (the common case)
        try:
            try:
                if not self.attempts.enter_handler(attempt):
                    # Lost while it waited for a thread, or its lease is over by this clock.
                    error = AttemptLost(attempt.lost or "lost before it started")
                elif handler.is_async or isolated:
                    value = self._call(handler, ctx, attempt)
                # The last look at the lease, as close to the handler's first line as Python
                # allows: a process frozen (SIGSTOP, a paused VM) right after enter_handler's look
                # resumes here after the reaper took the claim.
                elif time.monotonic() < attempt.lease_until:
                    if handler.batch is None:
                        value = handler.invoke(ctx, activity.payload)
                    else:  # a member of its type's batch (worker/batches.py)
                        value = self.batches.join(handler, handler.batch, attempt)
                else:
                    error = self.attempts.lease_ran_out(attempt)
            except BaseException as exc:
                error = exc
            if error is None and ctx.park_request is None:
                settled = self.attempts.leave_handler(attempt, take_outcome=True)
            else:
                self.attempts.leave_handler(attempt)
        except Interrupt as late:  # raised between the handler's return and leave_handler
            error = error or late
            self.attempts.leave_handler(attempt)
        finally:
            _current.reset(token)
            if traced is not None:
                traced.detach()
        if attempt.lost is None:
            ctx.close_reports()  # its progress and events, written before its outcome is
        queue_metrics.execution.observe(time.perf_counter() - began)
        if settled:
            self._completed(attempt, value)
        else:
            self._record(attempt, ctx, value, error)
        if traced is not None:
            traced.end(attempt, ctx, error)

    def _heal(self) -> None:
        """``heal_connection`` with this thread's connection kept (Django's look-up of it costs
        more than the check): the wrapper of a thread's connection stays the same object."""
        local = self._local
        try:
            connection = local.connection
        except AttributeError:
            from django.db import connections

            connection = local.connection = connections[self.alias]
        heal(connection, self.alias)

    def _metrics_of(self, queue: str) -> _QueueMetrics:
        found = self._queue_metrics[queue] = _QueueMetrics(
            metrics.counter("activity_started", queue=queue),
            metrics.histogram("activity_execution", queue=queue),
        )
        return found

    def context_for(self, attempt: Attempt) -> Context:
        return Context(
            attempt.activity, using=self.alias, inline_wait=self.inline_wait, deadline=attempt.deadline
        )

    def _call(self, handler: AnyActivity, ctx: Context, attempt: Attempt) -> Any:
        if handler.is_async:
            # async_to_sync keeps this thread serving the handler's sync_to_async calls, so ORM
            # calls inside an async handler use this thread's connection (not one shared thread).
            return async_to_sync(self._run_async)(handler, ctx, attempt)
        if time.monotonic() >= attempt.lease_until:  # the last look, as for a sync handler
            raise self.attempts.lease_ran_out(attempt)
        if handler.options.isolation == "process":
            return isolation.run_in_child(self.registry, handler, ctx, attempt)
        return handler.invoke(ctx, attempt.activity.payload)

    async def _run_async(self, handler: AnyActivity, ctx: Context, attempt: Attempt) -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # async_to_sync runs this coroutine as a task

        def cancel() -> None:
            loop.call_soon_threadsafe(task.cancel)

        attempt.cancel_async = cancel
        if time.monotonic() >= attempt.lease_until:  # the last look, as for a sync handler
            raise self.attempts.lease_ran_out(attempt)
        remaining = max(0.0, attempt.deadline - time.monotonic())
        soft = handler.options.soft_timeout_seconds
        soft_timer: asyncio.Timeout | None = None
        try:
            async with asyncio.timeout(remaining) as timer:
                if soft is None:
                    return await handler.invoke(ctx, attempt.activity.payload)
                # The soft limit cancels the handler's task: it may catch CancelledError and
                # clean up (or return); the hard timer above still bounds that.
                async with asyncio.timeout(
                    max(0.0, attempt.claimed_at + soft - time.monotonic())
                ) as soft_timer:
                    return await handler.invoke(ctx, attempt.activity.payload)
        except TimeoutError:
            if timer.expired():
                raise ActivityTimedOut(f"timed out after {attempt.activity.timeout_seconds}s") from None
            if soft_timer is not None and soft_timer.expired():
                raise SoftTimeLimitExceeded() from None
            raise
        except asyncio.CancelledError:
            if attempt.lost is not None:
                raise AttemptLost(attempt.lost) from None
            raise

    # outcomes ---------------------------------------------------------------------------------------

    def _record(self, attempt: Attempt, ctx: Context, value: Any, error: BaseException | None) -> None:
        if attempt.lost is not None or isinstance(error, AttemptLost):
            self.lost(attempt, attempt.lost or str(error))
            return
        if isinstance(error, ActivityTimedOut):
            self.time_out(attempt)
            return
        if ctx.park_request is not None:
            if not isinstance(error, Interrupt):
                log_event(
                    logger,
                    logging.WARNING,
                    "activity.park_swallowed",
                    f"The handler of {Attempt.NAMED} caught the Park its context raised (an except"
                    " clause too wide?); parking anyway.",
                    **attempt.log_fields(),
                )
            self.park(attempt, ctx)
            return
        if error is None:
            self.complete(attempt, value)
            return
        if isinstance(error, SoftTimeLimitExceeded) or (
            isinstance(error, isolation.ChildError) and error.soft
        ):
            self.soft_time_out(attempt, error)
            return
        if isinstance(error, isolation.ChildError):  # raised in a child process: recorded there
            self.fail(attempt, error.reason, retryable=error.retryable, failure=error.failure)
            return
        # A stored value Python can't read (a child's result, a checkpoint) reads the same on
        # every retry: failing for good spares the attempts (and the handler's side effects).
        retryable = not isinstance(error, (NonRetryableError, errors.SerializationError))
        if retryable:  # the type's retry_on / no_retry_on (registry.RetryPolicy)
            retryable = self._policy(attempt).retryable(error)
        self.fail(attempt, describe(error), retryable=retryable, failure=failures.recorded(error))

    def _policy(self, attempt: Attempt) -> RetryPolicy:
        handler = self.registry.resolve(attempt.activity.activity_type)
        return handler.retry_policy if handler is not None else DEFAULT_POLICY

    def complete(self, attempt: Attempt, value: Any) -> None:
        if self.attempts.take_outcome(attempt):
            self._completed(attempt, value)

    def _completed(self, attempt: Attempt, value: Any) -> None:
        """The handler returned ``value`` and this thread owns the outcome: queue the completion,
        or fail the attempt for good if the value can't be stored."""
        try:
            # Bounded like a payload: the acks would refuse it anyway, after the batch it rode in.
            _json_value(
                value, "result", max_bytes=storage_config.active().max_result_bytes, limit_name=RESULT_LIMIT
            )
        except errors.InvalidArgument as exc:
            self._write_failure(
                attempt, f"the handler's return value can't be stored: {exc.message}", retryable=False
            )
            return
        except BaseException:
            # The check itself broke (a value whose own code raises): give the outcome back, so
            # that the executor's last resort (crashed) settles it as an internal error.
            attempt.outcome_recorded = False
            raise
        attempt.completion_queued = True
        attempt.outcome = "completed"
        self.acks.add(attempt, value)

    def crashed(self, attempt: Attempt, exc: BaseException) -> None:
        """The executor's last resort, for an exception raised outside the handler.

        Settled as a non-retryable failure, not a retryable one: the error is in the worker's
        code path after (or around) the handler, so it would most likely happen again on every
        retry, re-running the handler's side effects each time (forever with ``max_attempts=0``).
        ``failed`` stops that, and is what an operator sees and can retry once the cause is fixed.
        If the outcome was already taken (a timeout, a lost claim, shutdown), its owner settles
        it; only if nobody can does the attempt leave the registry, so its lease runs out."""
        if isinstance(exc, Interrupt):  # landed outside the handler: same meaning as inside it
            if isinstance(exc, ActivityTimedOut):
                self.time_out(attempt)
            else:
                self.lost(attempt, attempt.lost or describe(exc))
            return
        if self.attempts.take_outcome(attempt):
            self._write_failure(
                attempt, f"internal error: {describe(exc)}", retryable=False, failure=failures.recorded(exc)
            )
        elif not attempt.completion_queued:
            self.attempts.remove([attempt])

    def refused(self, attempt: Attempt, exc: BaseException) -> None:
        """The ack buffer could not store this completion, and retrying would not help (not a
        transient database error): fail the attempt for good instead of holding it."""
        self._write_failure(
            attempt,
            f"internal error: the result could not be recorded: {describe(exc)}",
            retryable=False,
            failure=failures.recorded(exc),
        )

    def fail(self, attempt: Attempt, reason: str, *, retryable: bool, failure: Any = None) -> None:
        if self.attempts.take_outcome(attempt):
            self._write_failure(attempt, reason, retryable=retryable, failure=failure)

    def time_out(self, attempt: Attempt) -> None:
        """The attempt ran past its timeout: a retryable failure (like an expired lease, without
        waiting for the lease). Whoever notices first (watchdog or handler thread) records it."""
        if not self.attempts.take_outcome(attempt):
            return
        seconds = attempt.activity.timeout_seconds
        attempt.timed_out = True
        metrics.inc("activity_timeout", queue=attempt.queue)
        self.attempts.interrupt(attempt, f"timed out after {seconds}s", ActivityTimedOut)
        self._write_failure(
            attempt,
            f"ActivityTimedOut: the attempt ran longer than its timeout of {seconds}s",
            retryable=True,
        )

    def soft_time_out(self, attempt: Attempt, error: BaseException) -> None:
        """The handler let its soft limit's exception (or cancellation) propagate: a retryable
        failure, counted as a timeout like the hard limit's, with the handler's traceback."""
        if not self.attempts.take_outcome(attempt):
            return
        metrics.inc("activity_timeout", queue=attempt.queue)
        failure = error.failure if isinstance(error, isolation.ChildError) else failures.recorded(error)
        self._write_failure(
            attempt,
            "SoftTimeLimitExceeded: the attempt ran longer than its soft timeout of "
            f"{attempt.soft_timeout:g}s",
            retryable=True,
            failure=failure,
        )

    def _write_failure(self, attempt: Attempt, reason: str, *, retryable: bool, failure: Any = None) -> None:
        from runnerq_django import storage

        queue = attempt.queue
        reason = failures.storable(reason)[:MAX_ERROR_CHARS]
        # A type's own backoff, drawn once here so that a repeated call (a lost reply) asks for the
        # same delay; None keeps the spec's backoff from the row's columns.
        delay = self._policy(attempt).delay_seconds(attempt.activity.retry_count) if retryable else None
        outcome = self._settle(
            attempt,
            "fail",
            "failure",
            lambda: storage.fail(
                queue,
                attempt.claim,
                reason,
                retryable=retryable,
                failure=failure,
                delay_seconds=delay,
                using=self.alias,
            ),
        )
        if outcome is None:
            return
        attempt.outcome = outcome
        metrics.inc(_OUTCOME_METRICS.get(outcome, "activity_retry"), queue=queue)
        metrics.inc("activity_attempts", queue=queue, outcome=outcome)
        level = logging.WARNING if outcome in ("failed", "dead_letter") else logging.INFO
        log_event(
            logger,
            level,
            f"activity.{outcome}",
            f"The attempt of {Attempt.NAMED} failed ({_OUTCOME_WORDS.get(outcome, outcome)}): %(error)s",
            **attempt.log_fields(),
            error=reason[:500],
        )

    def park(self, attempt: Attempt, ctx: Context) -> None:
        from runnerq_django import storage

        request = ctx.park_request
        assert request is not None  # called only for a context that asked to park
        if not self.attempts.take_outcome(attempt):
            return
        waiting = self._settle(
            attempt,
            "park",
            "park",
            lambda: storage.park(
                attempt.queue,
                attempt.claim,
                kind=request.kind,
                step=request.step,
                wake_at=request.wake_at,
                result_id=request.result_id,
                producer_id=request.producer_id,
                using=self.alias,
            ),
        )
        if waiting is None:
            return
        attempt.outcome = "parked"
        metrics.inc("activity_yielded", queue=attempt.queue)
        metrics.inc("activity_attempts", queue=attempt.queue, outcome="parked")
        log_event(
            logger,
            logging.INFO,
            "activity.parked",
            f"Parked {Attempt.NAMED} on its %(kind)s %(step)r until %(wake_at)s.",
            **attempt.log_fields(),
            kind=request.kind,
            step=request.step,
            wake_at=request.wake_at.isoformat(),
            ready=not waiting,
        )

    def _settle(self, attempt: Attempt, operation: str, refusal: str, write: Callable[[], T]) -> T | None:
        """Run one settling write (``operation`` names it for the retries and the log); its value,
        or None if it was not written. Either way the attempt leaves the registry: a lost claim is
        recorded as ``claim_lost`` ("<refusal> refused"); any other error is logged, and the lease
        runs out so that the reaper retries the attempt."""
        try:
            value = retrying(self.alias, operation, write)
        except errors.ClaimLost:
            self.forget(attempt, f"{refusal} refused: the claim was lost")
            return None
        except Exception as exc:
            log_event(
                logger,
                logging.ERROR,
                f"activity.{operation}_unrecorded",
                f"Could not record the {refusal} of {Attempt.NAMED} (it runs again once its lease"
                " runs out): %(error)s",
                **attempt.log_fields(),
                error=str(exc),
            )
            self.attempts.remove([attempt])
            return None
        self.attempts.remove([attempt])
        return value

    def lost(self, attempt: Attempt, reason: str) -> None:
        """Nothing to write: the fence refuses this attempt's writes."""
        if self.attempts.take_outcome(attempt):
            self.forget(attempt, reason)

    def forget(self, attempt: Attempt, reason: str) -> None:
        self.attempts.remove([attempt])
        attempt.outcome = "claim_lost"
        metrics.inc("activity_claim_lost", queue=attempt.queue)
        metrics.inc("activity_attempts", queue=attempt.queue, outcome="claim_lost")
        log_event(
            logger,
            logging.WARNING,
            "activity.claim_lost",
            f"Lost the claim on {Attempt.NAMED}: its writes are refused from now on (%(reason)s).",
            **attempt.log_fields(),
            reason=reason,
        )


def describe(error: BaseException) -> str:
    message = failures.message_of(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def build_runner(
    *,
    registry: ActivityRegistry,
    attempts: Attempts,
    alias: str,
    inline_wait: float,
    acks_class: type[AckBuffer] = AckBuffer,
    runner_class: type[Runner] = Runner,
) -> Runner:
    """A runner and its ack buffer (``runner.acks``), wired both ways: the runner queues
    completions in the buffer, and the buffer hands back those it lost or the database refused."""

    def on_lost(attempt: Attempt, reason: str) -> None:
        runner.forget(attempt, reason)

    def on_refused(attempt: Attempt, exc: BaseException) -> None:
        runner.refused(attempt, exc)

    acks = acks_class(attempts, alias, on_lost=on_lost, on_refused=on_refused)
    runner = runner_class(
        registry=registry, attempts=attempts, acks=acks, alias=alias, inline_wait=inline_wait
    )
    return runner
