"""Batched completions: successful attempts are recorded with one ``complete_many`` per queue
instead of one round trip each.

A handler's thread drops its result here and moves on to the next activity. The flusher thread
writes whatever has gathered: under load the next batch builds up while one is being written, so
batches grow with the rate and no fixed delay is added. The attempt's claim stays in the
registry (and keeps being renewed) until its completion is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from runnerq_django import metrics
from runnerq_django.logs import log_event
from runnerq_django.worker.attempts import Attempt, Attempts
from runnerq_django.worker.db import Backoff, is_transient, reset_connection
from runnerq_django.worker.service import ThreadService

logger = logging.getLogger("runnerq_django.worker")

MAX_BATCH = 500  # well under the protocol's 1000-per-call bound


class AckBuffer(ThreadService):
    thread_name = "runnerq-acks"

    def __init__(
        self,
        attempts: Attempts,
        alias: str,
        *,
        on_lost: Callable[[Attempt, str], None],
        on_refused: Callable[[Attempt, BaseException], None] | None = None,
    ):
        super().__init__()
        self.attempts = attempts
        self.alias = alias
        self.on_lost = on_lost
        self.on_refused = on_refused
        self._pending: list[tuple[Attempt, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._idle = threading.Event()
        self._idle.set()

    def add(self, attempt: Attempt, value: Any) -> None:
        with self._lock:
            self._pending.append((attempt, value))
            if self._idle.is_set():  # (an Event's set and clear take its lock and notify)
                self._idle.clear()
        # Set after the append: the flusher clears the flag before it takes the pending items, so
        # a flag seen set is one it has not cleared yet, and it will take this item too.
        if not self._wake.is_set():
            self._wake.set()

    def write_now(self, attempt: Attempt, value: Any) -> bool:
        """Record one completion on the caller's thread instead of the flusher's (the in-process
        worker of ``runnerq_django.testing`` runs one attempt at a time); False if a transient
        database error left it unwritten."""
        return not self._write_all([(attempt, value)])

    def close(self, timeout: float) -> bool:
        """Write everything added so far and stop; False if that took longer than ``timeout``."""
        self._closing = True
        self._wake.set()
        self.join(timeout)
        return not self.is_alive()

    def flushed(self, timeout: float) -> bool:
        """Wait until everything added so far is written."""
        return self._idle.wait(timeout)

    def _take(self) -> list[tuple[Attempt, Any]]:
        with self._lock:
            batch, self._pending = self._pending, []
            return batch

    def _loop(self) -> None:
        backoff = Backoff()
        while True:
            self._wake.wait(0.5)
            self._wake.clear()
            batch = self._take()
            while batch:
                unwritten = self._write_all(batch)
                if unwritten:
                    # Keep them: the claims are still renewed, so a retry after the outage
                    # completes them; if their leases ran out meanwhile, the retry reports them lost.
                    time.sleep(backoff.failed())
                    with self._lock:
                        self._pending[:0] = unwritten
                else:
                    backoff.succeeded()
                batch = self._take()
            with self._lock:
                if not self._pending:
                    self._idle.set()
            if self._closing and not self._pending:
                return

    def _write_all(self, batch: list[tuple[Attempt, Any]]) -> list[tuple[Attempt, Any]]:
        """Write ``batch``; returns what a transient error left unwritten. An error that a retry
        would only repeat (not a lost connection or a timeout) must not hold the whole batch back
        forever: the items are written one by one, and the one at fault goes to ``on_refused``."""
        try:
            self._write(batch)
            return []
        except Exception as exc:
            if is_transient(exc):
                reset_connection(self.alias)
                self._log_unwritten(batch, exc)
                return batch
            if self.on_refused is None:
                self._log_unwritten(batch, exc)
                return batch
            if len(batch) == 1:
                log_event(
                    logger,
                    logging.ERROR,
                    "runnerq.acks.write_refused",
                    f"The database refused the completion of {Attempt.NAMED}: %(error)s",
                    exc_info=exc,
                    **batch[0][0].log_fields(),
                    error=str(exc),
                )
                self.on_refused(batch[0][0], exc)
                return []
        for index, item in enumerate(batch):
            if self._write_all([item]):
                return batch[index:]
        return []

    @staticmethod
    def _log_unwritten(batch: list[tuple[Attempt, Any]], exc: Exception) -> None:
        log_event(
            logger,
            logging.WARNING,
            "runnerq.acks.write_failed",
            "Could not write %(count)s completions (kept, to be written on the next try): %(error)s",
            count=len(batch),
            error=str(exc),
        )

    def _write(self, batch: list[tuple[Attempt, Any]]) -> None:
        from runnerq_django import storage

        by_queue: dict[str, list[tuple[Attempt, Any]]] = defaultdict(list)
        for item in batch:
            by_queue[item[0].activity.queue_name].append(item)
        for queue, items in by_queue.items():
            for start in range(0, len(items), MAX_BATCH):
                chunk = items[start : start + MAX_BATCH]
                began = time.perf_counter()
                lost = set(
                    storage.complete_many(queue, [(a.claim, value) for a, value in chunk], using=self.alias)
                )
                metrics.observe("activity_completion_persistence", time.perf_counter() - began, queue=queue)
                attempts = [a for a, _ in chunk]
                done = [a for a in attempts if a.activity.id not in lost] if lost else attempts
                metrics.inc("activity_completed", len(done), queue=queue)
                metrics.inc("activity_attempts", len(done), queue=queue, outcome="completed")
                if logger.isEnabledFor(logging.DEBUG):
                    for attempt in done:
                        log_event(
                            logger,
                            logging.DEBUG,
                            "activity.completed",
                            f"Completed {Attempt.NAMED}.",
                            **attempt.log_fields(),
                        )
                if lost:
                    for attempt in attempts:
                        if attempt.activity.id in lost:
                            self.on_lost(
                                attempt, "completion refused: the claim was lost before it was recorded"
                            )
                self.attempts.remove(attempts)
