"""Lease renewal and timeouts: the heartbeat of the attempts this process holds.

Every ``heartbeat`` the keeper renews all held claims with fenced ``renew_many`` calls, one per
queue and per ``RENEW_BATCH`` claims (completions still waiting in the ack buffer hold claims
too, so a lagging buffer can hold more than one call takes). A claim that was not renewed is
gone (reaped and reclaimed elsewhere, cancelled, or its activity finished): its handler is
stopped and its writes are refused. Between renewals the watchdog fails attempts that ran past
their activity's timeout (and warns sync handlers on threads that reach their type's
``soft_timeout``). Pool rows are kept alive on the same beat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from runnerq_django import metrics
from runnerq_django.exceptions import AttemptLost, SoftTimeLimitExceeded
from runnerq_django.logs import log_event
from runnerq_django.storage.validation import MAX_BATCH
from runnerq_django.worker.attempts import CLAIMED, RUNNING, Attempt, Attempts
from runnerq_django.worker.db import Backoff, is_transient, relax_commit, reset_connection
from runnerq_django.worker.service import ThreadService

logger = logging.getLogger("runnerq_django.worker")

WATCHDOG_TICK = 0.25
# An async handler enforces its own timeout (asyncio.timeout); the watchdog steps in only if
# its event loop is stuck past this grace.
ASYNC_TIMEOUT_GRACE = 5.0
# Claims per renew_many: the protocol's per-call bound, which the call refuses to exceed.
RENEW_BATCH = MAX_BATCH


@dataclass(eq=False)
class LeaseKeeper(ThreadService):
    thread_name = "runnerq-leases"

    attempts: Attempts
    alias: str
    _: KW_ONLY
    lease_ms: int
    heartbeat: float
    on_timeout: Callable[[Attempt], None]
    on_beat: Callable[[], None]
    stop: threading.Event
    relaxed_commit: bool = True

    def __post_init__(self) -> None:
        super().__init__()

    def _loop(self) -> None:
        backoff = Backoff(maximum=self.heartbeat)
        next_beat = time.monotonic() + self.heartbeat
        while not self.stop.wait(WATCHDOG_TICK):
            self.check_timeouts()
            if time.monotonic() < next_beat:
                continue
            try:
                self.renew()
                self.on_beat()
                backoff.succeeded()
                next_beat = time.monotonic() + self.heartbeat
            except Exception as exc:
                if is_transient(exc):
                    reset_connection(self.alias)
                metrics.inc("activity_heartbeat_failed")
                log_event(
                    logger,
                    logging.WARNING,
                    "runnerq.heartbeat.failed",
                    "Could not renew the leases of running activities (retrying soon): %(error)s",
                    error=str(exc),
                )
                # Try again soon: the lease is only a few heartbeats long.
                next_beat = time.monotonic() + backoff.failed()

    def check_timeouts(self) -> None:
        now = time.monotonic()
        for attempt in self.attempts.snapshot():
            if attempt.state != RUNNING or attempt.outcome_recorded:
                continue
            grace = ASYNC_TIMEOUT_GRACE if attempt.cancel_async is not None else 0.0
            if now >= attempt.deadline + grace:
                self.on_timeout(attempt)
            elif now >= attempt.soft_deadline and not attempt.warned:
                self.attempts.warn(attempt, SoftTimeLimitExceeded)

    def renew(self) -> None:
        if self.relaxed_commit:
            relax_commit(self.alias)  # a renewal lost in a database crash is an expiry: at-least-once holds
        by_queue: dict[str, list[Attempt]] = defaultdict(list)
        for attempt in self.attempts.snapshot():
            if attempt.lost is None:
                by_queue[attempt.queue].append(attempt)
        for queue, held in by_queue.items():
            for start in range(0, len(held), RENEW_BATCH):
                self._renew_chunk(queue, held[start : start + RENEW_BATCH])

    def _renew_chunk(self, queue: str, held: list[Attempt]) -> None:
        from runnerq_django import storage

        sent = time.monotonic()
        renewed = storage.renew_many(queue, [a.claim for a in held], self.lease_ms, using=self.alias)
        metrics.inc("activity_lease_renewed", len(renewed), queue=queue)
        for attempt in held:
            if attempt.activity.id in renewed:
                attempt.lease_until = max(attempt.lease_until, sent + self.lease_ms / 1000)
                continue
            # Not renewed: lost -- unless its outcome was being written meanwhile (a completion
            # that committed makes the renewal miss too; the writer reports a real loss itself).
            if attempt.outcome_recorded:
                continue
            if attempt.state in (CLAIMED, RUNNING):
                self.attempts.interrupt(
                    attempt, "the lease was not renewed (reclaimed elsewhere or cancelled)", AttemptLost
                )
