"""Gathers the attempts of a batch type into one call of its handler (runnerq_django.activities.batch).

Each member is an ordinary attempt on its own executor thread, run by the :class:`Runner` as any
other: where a one-at-a-time handler would be called, the member joins its type's open batch here
and waits. The batch closes when it holds ``max_size`` members (or as many as this worker can hold
at once), or ``max_wait`` after it opened; the first member thread to see it closed runs the
handler with the members still held, and every member then leaves with its own outcome (a value to
complete with, or an exception to fail with), which its thread records as for any attempt. So
each activity keeps its lease (the lease keeper renews every member), its fencing, its time limit
(the watchdog interrupts the member's thread; a member that leaves before the handler runs is
left out of it) and its events.

A member waits in short slices, so an interrupt raised into its thread lands within one.

Just before the call, the thread that runs the handler records the batch (``storage.batches``: its
members and the attempt each runs, in the app's own ``runnerq_batch_runs``), so the admin links
the members to each other; a failure to record is logged and the batch runs all the same.

Internal: not part of the public API.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runnerq_django.activities.batch import (
    BatchFailed,
    BatchInterrupted,
    BatchItem,
    BatchOptions,
    BatchResult,
)
from runnerq_django.exceptions import Interrupt
from runnerq_django.logs import log_event
from runnerq_django.observability import tracing
from runnerq_django.storage import batches as stored_batches

if TYPE_CHECKING:
    from runnerq_django.activities.registry import AnyActivity
    from runnerq_django.worker.attempts import Attempt

SLICE = 0.05  # how long a member waits at a time (an interrupt lands between slices)

logger = logging.getLogger("runnerq_django.worker")


class _Member:
    __slots__ = ("attempt", "error", "item", "span", "value")

    def __init__(self, attempt: Attempt):
        self.attempt = attempt
        activity = attempt.activity
        self.item = BatchItem(
            id=activity.id,
            payload=activity.payload,
            attempt=activity.retry_count + 1,
            activity_type=activity.activity_type,
            queue=activity.queue_name,
            metadata=activity.metadata,
        )
        self.value: Any = None
        self.error: BaseException | None = None
        self.span = _current_span()  # its attempt's span (on its thread), which the batch links


class _Batch:
    def __init__(self, options: BatchOptions, size: int, now: float):
        self.size = size
        self.closes_at = now + options.max_wait_seconds
        self.members: list[_Member] = []
        self.closed = False  # no one joins any more
        self.started = False  # a member's thread runs the handler
        self.done = threading.Event()
        self.ready = threading.Event()  # closed: the members waiting for it to fill wake up
        self.runner: int | None = None  # the thread that runs the handler


class BatchCollector:
    """The open batch of each batch type of one worker (one database)."""

    def __init__(self, capacity: int | None = None, *, alias: str | None = None):
        self.alias = alias  # the database its batches are recorded in (runnerq_batch_runs)
        # At most this many attempts can be held at once (the worker's concurrency): a batch
        # closes at that size instead of waiting max_wait for members that can't come.
        self.capacity = capacity
        self._open: dict[str, _Batch] = {}
        self._expected: dict[str, int] = {}
        self._lock = threading.Lock()
        self.batches_run = 0  # handler calls (tests, the bench)

    def expect(self, activity_type: str, count: int) -> None:
        """The next batch of ``activity_type`` closes once ``count`` members joined (the testing
        toolkit, which claims a batch's members together and knows no more will come)."""
        with self._lock:
            self._expected[activity_type] = count

    def join(self, handler: AnyActivity, options: BatchOptions, attempt: Attempt) -> Any:
        """Run ``attempt`` as a member of its type's batch: its own result, or raise its error."""
        name = handler.name
        member = _Member(attempt)
        with self._lock:
            batch = self._open.get(name)
            if batch is None:
                size = self._expected.pop(name, None) or options.max_size
                if self.capacity is not None:
                    size = min(size, self.capacity)
                batch = self._open[name] = _Batch(options, max(1, size), time.monotonic())
            batch.members.append(member)
            runs = len(batch.members) >= batch.size  # full: this thread runs it, no wake-up
            if runs:
                self._close(name, batch)
                batch.started = True
                batch.runner = threading.get_ident()
        try:
            if not runs:
                runs = self._wait(name, batch)
            if runs:
                self._run(handler, batch)
        except BaseException as exc:
            mine = batch.runner == threading.get_ident()
            if mine and not batch.done.is_set():  # stopped before the call: the others must not wait
                for m in batch.members:
                    m.error = BatchInterrupted(f"the batch's handler was stopped before it ran: {exc!r}")
                batch.done.set()
            elif not mine:
                self._leave(name, batch, member)
            raise
        if member.error is not None:
            raise member.error
        return member.value

    def _close(self, name: str, batch: _Batch) -> None:
        batch.closed = True
        batch.ready.set()
        if self._open.get(name) is batch:
            del self._open[name]

    def _wait(self, name: str, batch: _Batch) -> bool:
        """Wait until the batch is done (False) or this thread is the one to run it (True)."""
        while True:
            with self._lock:
                if batch.done.is_set():
                    return False
                if not batch.started:
                    now = time.monotonic()
                    if batch.closed or now >= batch.closes_at:
                        self._close(name, batch)
                        batch.started = True
                        batch.runner = threading.get_ident()
                        return True
                    pause = min(SLICE, batch.closes_at - now)
                else:
                    pause = SLICE
            (batch.done if batch.started else batch.ready).wait(pause)

    def _leave(self, name: str, batch: _Batch, member: _Member) -> None:
        """An interrupt reached a member before the handler took it: it leaves the batch."""
        with self._lock:
            if batch.started:
                return
            if member in batch.members:
                batch.members.remove(member)
            if not batch.members:
                self._close(name, batch)

    def _run(self, handler: AnyActivity, batch: _Batch) -> None:
        try:
            with self._lock:
                # Members whose claim is gone (cancelled, reclaimed) are left out.
                members = [m for m in batch.members if m.attempt.lost is None]
            self.batches_run += 1
            traced = _batch_span(handler.name, members)
            try:
                if members:
                    self._record(handler.name, members)
                if traced is None:
                    returned = handler.func([m.item for m in members]) if members else None
                else:
                    with traced:
                        returned = handler.func([m.item for m in members]) if members else None
            except Interrupt as stopped:  # this thread's own attempt's interrupt
                mine = threading.get_ident()
                for m in members:
                    m.error = (
                        stopped
                        if m.attempt.thread_id == mine
                        else BatchInterrupted(f"the batch's handler was stopped: {stopped}")
                    )
                raise
            except Exception as exc:
                for m in members:
                    m.error = exc
                return
            _distribute(members, returned)
        finally:
            batch.done.set()

    def _record(self, name: str, members: Sequence[_Member]) -> None:
        """Record the batch about to be called (its members, the attempt each runs); a failure is
        logged and the batch runs all the same."""
        try:
            stored_batches.record(
                name,
                members[0].item.queue,
                [(m.item.id, m.item.attempt) for m in members],
                using=self.alias,
            )
        except Exception as exc:
            log_event(
                logger,
                logging.WARNING,
                "runnerq.batches.record_failed",
                "The batch of %(size)s %(activity_type)s activities was not recorded (it runs all "
                "the same; the admin will not link its members): %(error)s",
                activity_type=name,
                size=len(members),
                error=repr(exc),
            )


def _current_span() -> Any:
    """The span context current on this thread (its attempt's), or None when tracing is off."""
    otel = tracing.active()
    if otel is None:
        return None
    context = otel.trace.get_current_span().get_span_context()
    return context if context.is_valid else None


def _batch_span(name: str, members: Sequence[_Member]) -> Any:
    """One span for the handler's call, a child of the attempt span of the member whose thread
    runs it, with a link to every member's attempt span; None when tracing is off."""
    otel = tracing.active()
    if otel is None or not members:
        return None
    try:
        span = otel.tracer.start_span(
            f"batch {name}",
            links=[otel.trace.Link(m.span) for m in members if m.span is not None],
            attributes={"runnerq.activity.type": name, "runnerq.batch.size": len(members)},
        )
        return otel.trace.use_span(
            span, end_on_exit=True, record_exception=True, set_status_on_exception=True
        )
    except Exception:  # tracing never stops the work
        return None


def _distribute(members: Sequence[_Member], returned: Any) -> None:
    """Each member's value or error from what the handler returned."""
    if returned is None:
        return
    if isinstance(returned, BatchResult):
        results, failed = returned.results, returned.failed
        known = {m.item.id for m in members}
        strays = [key for key in (*results, *failed) if key not in known]
        if strays:
            error = TypeError(f"the batch handler's BatchResult names ids not in the batch: {_ids(strays)}")
            for m in members:
                m.error = error
            return
        for m in members:
            key = m.item.id
            if key in failed:
                reason = failed[key]
                m.error = reason if isinstance(reason, BaseException) else BatchFailed(str(reason))
            else:
                m.value = results.get(key)
        return
    if isinstance(returned, (list, tuple)) and len(returned) == len(members):
        for m, value in zip(members, returned, strict=True):
            m.value = value
        return
    error = TypeError(
        f"a batch handler returns None, a list of {len(members)} results (one per item, in order) or a "
        f"BatchResult, got {type(returned).__name__}"
        + (f" of {len(returned)}" if isinstance(returned, (list, tuple)) else "")
    )
    for m in members:
        m.error = error


def _ids(keys: Sequence[uuid.UUID]) -> str:
    return ", ".join(str(key) for key in keys[:5]) + (" ..." if len(keys) > 5 else "")
