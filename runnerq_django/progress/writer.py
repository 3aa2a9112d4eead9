"""The handler's side of progress and events: ``ctx.progress()`` and ``ctx.publish()`` only
buffer, in the attempt's :class:`Reports`, and return at once; one thread per process (the
:class:`Writer`) writes each attempt's buffer at most every :data:`WRITE_INTERVAL_SECONDS`, in
one fenced statement (``storage.progress.write``): the latest progress (whatever the handler
reported in between is coalesced away) and the events published since, in order. The worker
writes what is left when the handler ends (:meth:`Reports.close`), before it records the
outcome, so a reader that sees the activity finished has all its events.

An async handler never waits on the database here (its loop would stall, and Django refuses
synchronous queries on an event loop); a process-isolated handler's child has its own writer
and writes what is left before it sends its outcome.

Internal: not part of the public API.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from typing import Any

from runnerq_django.logs import log_event
from runnerq_django.storage import progress as stored
from runnerq_django.storage.types import Claim

logger = logging.getLogger("runnerq_django.progress")

# An attempt's buffer is written at most this often (a handler may call progress() a million
# times a second: the database sees four writes a second).
WRITE_INTERVAL_SECONDS = 0.25
# The writer's thread ends after this long with nothing to write (and closes its connection).
IDLE_SECONDS = 5.0


class Reports:
    """One attempt's buffered progress and events. The handler's thread adds to it; the writer's
    thread and, at the end, the worker's write it. ``_lock`` guards the buffer, ``_writing``
    makes one write at a time (so the events' order holds across the two threads)."""

    def __init__(self, queue: str, claim: Claim, attempt: int, using: str | None):
        self.queue = queue
        self.claim = claim
        self.attempt = attempt
        self.using = using
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._progress: tuple[Any, Any, Any] | None = None
        self._events: collections.deque[tuple[str, Any]] = collections.deque(
            maxlen=stored.MAX_EVENTS_PER_ACTIVITY
        )
        self.last_write = 0.0  # time.monotonic() when the last write began
        self.fenced = False  # a write found the claim gone (or the row not visible): the writer stops
        self.closed = False
        self._failures = 0

    def set_progress(self, done: Any, total: Any, message: Any) -> None:
        value = stored.progress_value(done, total, message)
        with self._lock:
            self._progress = value
        _writer().schedule(self)

    def publish(self, name: Any, data: Any) -> None:
        name = stored.event_name(name)
        # Refused here, in the handler, not later in the writer; and kept as it is now (a copy of
        # its JSON), whatever the handler does to the object afterwards.
        snapshot = json.loads(stored.event_data(data))
        with self._lock:
            self._events.append((name, snapshot))
        _writer().schedule(self)

    def pending(self) -> bool:
        with self._lock:
            return self._progress is not None or bool(self._events)

    def write(self, *, final: bool = False) -> None:
        """Write what is buffered (nothing when nothing is). A write the claim's fence refused
        puts the buffer back (a later write may see the row: a test's transaction) and stops
        the writer's thread writing this attempt; the final write drops it."""
        with self._writing:
            # From the start: a report made while this write runs schedules the next one an
            # interval after this one began, not at once.
            self.last_write = time.monotonic()
            with self._lock:
                progress, events = self._progress, list(self._events)
                self._progress = None
                self._events.clear()
            if progress is None and not events:
                return
            try:
                written = stored.write(
                    self.queue,
                    self.claim,
                    attempt=self.attempt,
                    progress=progress,
                    events=events,
                    using=self.using,
                )
            except Exception:
                self._failures += 1
                if self._failures == 1 or final:
                    log_event(
                        logger,
                        logging.WARNING,
                        "activity.progress_write_failed",
                        f"Could not write the progress and events of activity {self.claim.id}"
                        + ("; they are lost." if final else "; they are kept and written again later."),
                        exc_info=True,
                        activity_id=str(self.claim.id),
                        queue=self.queue,
                    )
                if not final:
                    self._put_back(progress, events)
                return
            self._failures = 0
            if written is None and not final:
                self.fenced = True  # the claim is gone, or its row not visible to this connection
                self._put_back(progress, events)

    def _put_back(self, progress: tuple[Any, Any, Any] | None, events: list[tuple[str, Any]]) -> None:
        with self._lock:
            if self._progress is None:
                self._progress = progress
            kept = list(self._events)
            self._events.clear()
            self._events.extend(events)  # the oldest first; the deque keeps the newest
            self._events.extend(kept)

    def close(self) -> None:
        """The handler is over: write what is left now, in this thread, and forget the attempt."""
        self.closed = True
        _writer().forget(self)
        self.write(final=True)


class Writer:
    """This process's writer thread: it writes each scheduled attempt's buffer when due, and
    ends (closing its connections) after :data:`IDLE_SECONDS` with nothing to do."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._due: dict[Reports, float] = {}
        self._thread: threading.Thread | None = None

    def schedule(self, reports: Reports) -> None:
        if reports.closed or reports.fenced:
            return
        with self._changed:
            if reports in self._due:
                return  # written when due, with whatever comes until then
            self._due[reports] = max(time.monotonic(), reports.last_write + WRITE_INTERVAL_SECONDS)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="runnerq-progress", daemon=True)
                self._thread.start()
            else:
                self._changed.notify()

    def forget(self, reports: Reports) -> None:
        with self._changed:
            self._due.pop(reports, None)

    def _next(self) -> Reports | None:
        """The next buffer due, waiting for it; ``None`` when idle long enough to stop."""
        idle_since = time.monotonic()
        with self._changed:
            while True:
                now = time.monotonic()
                if self._due:
                    reports, at = min(self._due.items(), key=lambda item: item[1])
                    if at <= now:
                        del self._due[reports]
                        return reports
                    self._changed.wait(at - now)
                    idle_since = time.monotonic()
                    continue
                if now - idle_since >= IDLE_SECONDS:
                    self._thread = None
                    return None
                self._changed.wait(IDLE_SECONDS - (now - idle_since))

    def _run(self) -> None:
        from django.db import connections

        try:
            while (reports := self._next()) is not None:
                if not reports.closed:
                    reports.write()
                if reports.pending() and not reports.fenced and not reports.closed:
                    self.schedule(reports)  # failed, or more came while it was written
        finally:
            connections.close_all()  # this thread's connections


_instance: Writer | None = None
_instance_lock = threading.Lock()


def _writer() -> Writer:
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = Writer()
        return _instance


def _forget_after_fork() -> None:
    """A forked child (a process-isolated handler's) has no writer thread: it starts its own."""
    global _instance, _instance_lock
    _instance = None
    _instance_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
